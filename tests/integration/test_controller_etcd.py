"""Controller persistence in a real etcd: after a restart the instance set is restored, pushed again once the node
managers' heartbeats confirm it (recognised without any re-registration), with etcd authentication and TLS,
and a malformed value (or one naming addresses outside the job) does not keep the controller from starting."""

import asyncio
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aetcd
import httpx
import pytest

from motor.controller.persistence import PersistedInstance
from motor.protocol.controller import ControllerState, bearer
from motor.protocol.instances import Endpoint, Instance
from tests.fixtures.control import TOKEN, ConfigPair, ControlPlane, RefreshRecorder, sim_config
from tests.fixtures.etcd import EtcdServer, EtcdTls
from tests.fixtures.pki import Pki
from tests.integration.test_node_manager_engine import wait_status

AUTH = bearer(TOKEN)


def persistent(etcd: EtcdServer) -> dict[str, Any]:
    return {
        "motor_controller_config": {
            "instance_config": {"instance_heartbeat_timeout": 3, "instance_manager_check_interval": 0.2},
            "etcd_config": {
                "enable_etcd_persistence": True,
                "etcd_host": etcd.host,
                "etcd_port": etcd.port,
                "etcd_timeout": 3,
            },
        },
        "motor_nodemanger_config": {"basic_config": {"heartbeat_interval_seconds": 0.5}},
    }


async def controller_state(config: ConfigPair) -> ControllerState:
    async with httpx.AsyncClient(timeout=5) as client:
        response = await client.get(f"{config.controller_url}/controller/instances", headers=AUTH)
        return ControllerState.model_validate(response.json())


async def persisted_ids(etcd: EtcdServer, job_id: str) -> set[str]:
    async with aetcd.Client(etcd.host, etcd.port) as client:
        found = await client.get_prefix(f"/motor/{job_id}/controller/instances/".encode())
        return {kv.key.decode().rsplit("/", 1)[-1] for kv in found}


async def test_restarted_controller_restores_and_repushes_once_heartbeats_confirm(
    tmp_path: Path,
    control_plane: ControlPlane,
    refresh_recorder: Callable[..., RefreshRecorder],
    etcd_server: EtcdServer,
) -> None:
    recorder = refresh_recorder()
    await recorder.start()
    config = sim_config(tmp_path / "config", pool=False, overrides=persistent(etcd_server))
    job_id = config.doc["motor_deploy_config"]["job_id"]
    control_plane.controller(config, coordinators=recorder.url)
    control_plane.node_manager(config, "prefill", 0, k=0)
    control_plane.node_manager(config, "decode", 0, k=1)
    for instance_id in ("prefill-0", "decode-0"):
        await wait_status(config, instance_id, "active")
    assert await persisted_ids(etcd_server, job_id) == {"prefill-0", "decode-0"}

    controller = next(p for p in control_plane.processes if p.name == "controller")
    node_managers = [p for p in control_plane.processes if p.name.startswith("nm-")]
    for node_manager in node_managers:  # their heartbeats pause while the controller restarts
        node_manager.process.send_signal(signal.SIGSTOP)
    try:
        controller.stop(signal.SIGKILL)
        recorder.view.clear()  # the coordinator restarts too: only the new controller can refill it
        events_before = len(recorder.events)
        control_plane.controller(config, coordinators=recorder.url, name="controller-2")

        # restored, but not routable on the persisted word alone: no heartbeat has confirmed them yet
        state = await controller_state(config)
        assert {v.instance.id: v.instance.status for v in state.instances} == {
            "prefill-0": "initial",
            "decode-0": "initial",
        }
        await recorder.wait_for(lambda r: len(r.events) > events_before)
        await asyncio.sleep(1.0)
        assert recorder.routable() == set()
    finally:
        for node_manager in node_managers:
            node_manager.process.send_signal(signal.SIGCONT)

    await recorder.wait_for(lambda r: r.routable() == {"prefill-0", "decode-0"})
    # heartbeats keep them active past the heartbeat timeout, and nobody registered again
    await asyncio.sleep(3.5)  # longer than instance_heartbeat_timeout
    state = await controller_state(config)
    assert [(v.instance.status, v.registrations) for v in state.instances] == [("active", 0), ("active", 0)]
    for node_manager in node_managers:
        assert "registering again" not in node_manager.log_text()

    # a terminated instance is removed from etcd, so the next restart does not bring it back
    async with httpx.AsyncClient(timeout=60) as client:
        response = await client.post(
            f"{config.controller_url}/controller/terminate_instance",
            json={"instance_id": "decode-0"},
            headers=AUTH,
        )
        assert response.json()["node_manager_stopped"] is True
    await recorder.wait_for(lambda r: r.routable() == {"prefill-0"})
    assert await persisted_ids(etcd_server, job_id) == {"prefill-0"}


async def test_controller_without_its_etcd_fails_with_a_clear_message(
    tmp_path: Path, control_plane: ControlPlane, etcd_server: EtcdServer
) -> None:
    config = sim_config(tmp_path / "config", pool=False, overrides=persistent(etcd_server))
    etcd_server.stop()
    with pytest.raises(RuntimeError, match="cannot read the persisted instance set from etcd at"):
        control_plane.controller(config, coordinators="http://127.0.0.1:9")


async def terminate(config: ConfigPair, instance_id: str) -> None:
    async with httpx.AsyncClient(timeout=60) as client:
        response = await client.post(
            f"{config.controller_url}/controller/terminate_instance",
            json={"instance_id": instance_id},
            headers=AUTH,
        )
        assert response.status_code == 200


def etcdctl_ids(etcd: EtcdServer, job_id: str) -> set[str]:
    keys = etcd.etcdctl("get", f"/motor/{job_id}/controller/instances/", "--prefix", "--keys-only")
    return {line.rsplit("/", 1)[-1] for line in keys.split() if line}


async def wait_persisted(etcd: EtcdServer, job_id: str, expected: set[str], timeout: float = 15.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while (found := etcdctl_ids(etcd, job_id)) != expected:
        assert asyncio.get_running_loop().time() < deadline, found
        await asyncio.sleep(0.2)


async def test_controller_authenticates_to_etcd_and_renews_an_expired_token(
    tmp_path: Path,
    control_plane: ControlPlane,
    refresh_recorder: Callable[..., RefreshRecorder],
    etcd_factory: Callable[..., EtcdServer],
) -> None:
    etcd = etcd_factory(extra=("--auth-token-ttl", "1"))  # simple tokens expire after 1 s without use
    etcd.enable_auth("root-secret")
    recorder = refresh_recorder()
    await recorder.start()
    config = sim_config(tmp_path / "config", pool=False, overrides=persistent(etcd))
    job_id = config.doc["motor_deploy_config"]["job_id"]
    wrong = {"MOTOR_ETCD_USERNAME": "root", "MOTOR_ETCD_PASSWORD": "not-it"}
    with pytest.raises(RuntimeError, match="check MOTOR_ETCD_USERNAME / MOTOR_ETCD_PASSWORD"):
        control_plane.controller(config, coordinators=recorder.url, name="controller-wrong", env=wrong)
    anonymous = "set MOTOR_ETCD_USERNAME / MOTOR_ETCD_PASSWORD if etcd requires authentication"
    with pytest.raises(RuntimeError, match=anonymous):
        control_plane.controller(config, coordinators=recorder.url, name="controller-anonymous")

    credentials = {"MOTOR_ETCD_USERNAME": "root", "MOTOR_ETCD_PASSWORD": "root-secret"}
    controller = control_plane.controller(config, coordinators=recorder.url, env=credentials)
    control_plane.node_manager(config, "prefill", 0, k=0)
    control_plane.node_manager(config, "decode", 0, k=1)
    for instance_id in ("prefill-0", "decode-0"):
        await wait_status(config, instance_id, "active")
    await asyncio.sleep(2.5)  # the controller's auth token expires while nothing changes
    await terminate(config, "decode-0")
    await wait_persisted(etcd, job_id, {"prefill-0"})
    assert "invalid auth token" in controller.log_text()  # the expired token was met, and renewed


async def test_controller_persists_to_etcd_over_mutual_tls_with_an_encrypted_key(
    tmp_path: Path,
    control_plane: ControlPlane,
    refresh_recorder: Callable[..., RefreshRecorder],
    etcd_factory: Callable[..., EtcdServer],
    pki: Pki,
) -> None:
    etcd = etcd_factory(tls=EtcdTls(pki, pki.issue("etcd-server"), pki.issue("etcdctl")))
    controller_cert = pki.issue("controller-etcd-client", password="key-password")
    assert controller_cert.passwd is not None
    recorder = refresh_recorder()
    await recorder.start()
    tls = {
        "enable_tls": True,
        "ca_file": str(pki.ca_file),
        "cert_file": str(controller_cert.cert),
        "key_file": str(controller_cert.key),
        "passwd_file": str(controller_cert.passwd),
    }
    overrides = persistent(etcd)
    overrides["motor_controller_config"]["etcd_tls_config"] = tls
    config = sim_config(tmp_path / "config", pool=False, overrides=overrides)
    job_id = config.doc["motor_deploy_config"]["job_id"]
    control_plane.controller(config, coordinators=recorder.url)
    control_plane.node_manager(config, "prefill", 0, k=0)
    await wait_status(config, "prefill-0", "active")
    await wait_persisted(etcd, job_id, {"prefill-0"})

    # without a client certificate etcd refuses the controller
    without_cert = {**tls, "cert_file": "", "key_file": "", "passwd_file": ""}
    overrides["motor_controller_config"]["etcd_tls_config"] = without_cert
    refused = sim_config(tmp_path / "refused", pool=False, overrides=overrides)
    with pytest.raises(RuntimeError, match="cannot read the persisted instance set from etcd at https://"):
        control_plane.controller(refused, coordinators=recorder.url, name="controller-no-cert")


async def test_malformed_persisted_values_are_skipped(
    tmp_path: Path,
    control_plane: ControlPlane,
    refresh_recorder: Callable[..., RefreshRecorder],
    etcd_server: EtcdServer,
) -> None:
    recorder = refresh_recorder()
    await recorder.start()
    config = sim_config(tmp_path / "config", pool=False, overrides=persistent(etcd_server))
    prefix = f"/motor/{config.doc['motor_deploy_config']['job_id']}/controller/instances/"
    etcd_server.etcdctl("put", prefix + "broken", "{not json")
    etcd_server.etcdctl("put", prefix + "stranger", '{"instance": {"id": "x"}}')
    # well formed, but pointing outside the job: held to the registration policy like a registration
    elsewhere = PersistedInstance(
        instance=Instance(
            id="decode-0",
            role="decode",
            engine_id="decode-0",
            model_name="sim-model",
            endpoints=[Endpoint(host="169.254.169.254", port=80)],
        ),
        node_manager_url="http://169.254.169.254:80",
    )
    etcd_server.etcdctl("put", prefix + "decode-0", elsewhere.model_dump_json())
    controller = control_plane.controller(config, coordinators=recorder.url)
    control_plane.node_manager(config, "prefill", 0, k=0)
    await wait_status(config, "prefill-0", "active")
    log = controller.log_text()
    assert f"skipping {prefix}broken" in log and f"skipping {prefix}stranger" in log
    assert "not restoring decode-0" in log and "outside the job's networks" in log
    state = await controller_state(config)
    assert [v.instance.id for v in state.instances] == ["prefill-0"]
