"""Controller persistence in a real etcd: after a restart the instance set is restored and pushed again, and the
node managers' heartbeats are recognised without any re-registration."""

import asyncio
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aetcd
import httpx
import pytest

from motor.protocol.controller import ControllerState, bearer
from tests.fixtures.control import TOKEN, ConfigPair, ControlPlane, RefreshRecorder, sim_config
from tests.fixtures.etcd import EtcdServer
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


async def test_restarted_controller_restores_and_repushes_without_reregistration(
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
    controller.stop(signal.SIGKILL)
    recorder.view.clear()  # the coordinator restarts too: only the new controller can refill it
    events_before = len(recorder.events)
    control_plane.controller(config, coordinators=recorder.url, name="controller-2")

    state = await controller_state(config)
    assert {v.instance.id: v.instance.status for v in state.instances} == {
        "prefill-0": "active",
        "decode-0": "active",
    }
    await recorder.wait_for(lambda r: r.routable() == {"prefill-0", "decode-0"})
    assert recorder.events[events_before].event == "set"
    # heartbeats keep them active past the heartbeat timeout, and nobody registered again
    await asyncio.sleep(3.5)  # longer than instance_heartbeat_timeout
    state = await controller_state(config)
    assert [(v.instance.status, v.registrations) for v in state.instances] == [("active", 0), ("active", 0)]
    for name in ("nm-prefill-0", "nm-decode-0"):
        assert (
            "registering again" not in next(p for p in control_plane.processes if p.name == name).log_text()
        )

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
