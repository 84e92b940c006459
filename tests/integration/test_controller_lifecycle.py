"""The controller as a real process, driven over HTTP the way a node manager drives it: authentication, the
instance lifecycle under short timeouts, and pushes to a coordinator-side recorder."""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from motor.protocol.controller import ControllerState, InstanceAck, Registration, bearer
from motor.protocol.credentials import instance_credential
from motor.protocol.instances import Endpoint
from motor.protocol.specs import NodeManagerSpec
from tests.fixtures.control import (
    TOKEN,
    ConfigPair,
    ControlPlane,
    RefreshRecorder,
    compiled_specs,
    sim_config,
)

FAST = {
    "motor_controller_config": {
        "instance_config": {
            "instance_heartbeat_timeout": 1.0,
            "instance_expired_timeout": 2.5,
            "instance_manager_check_interval": 0.1,
        },
        "event_config": {"coordinator_heartbeat_interval": 1.0},
    }
}
AUTH = bearer(TOKEN)


def credential(instance_id: str) -> dict[str, str]:
    """The header a node manager of `instance_id` authenticates with."""
    return bearer(instance_credential(TOKEN, instance_id))


def registration(
    config: ConfigPair, instance_id: str = "prefill-0", state: str = "starting"
) -> dict[str, Any]:
    """The registration the node manager of `instance_id` sends, at the addresses the plan gives it."""
    spec = compiled_specs(config, config.directory / "run")[instance_id]
    assert isinstance(spec, NodeManagerSpec)
    return Registration(
        instance_id=instance_id,
        role=spec.role,
        engine_id=instance_id,
        model_name="sim-model",
        node_manager_url=f"http://127.0.0.1:{spec.port}",
        endpoints=[Endpoint(host="127.0.0.1", port=spec.engine.port, status_port=spec.engine.status_port)],
        engine_state=state,  # type: ignore[arg-type]
    ).model_dump(mode="json")


async def register(
    client: httpx.AsyncClient, config: ConfigPair, instance_id: str = "prefill-0", state: str = "starting"
) -> httpx.Response:
    body = registration(config, instance_id, state)
    return await client.post("/controller/register", json=body, headers=credential(instance_id))


async def state(client: httpx.AsyncClient) -> ControllerState:
    response = await client.get("/controller/instances", headers=AUTH)
    response.raise_for_status()
    return ControllerState.model_validate(response.json())


async def status_of(client: httpx.AsyncClient, instance_id: str) -> str | None:
    for view in (await state(client)).instances:
        if view.instance.id == instance_id:
            return view.instance.status
    return None


async def heartbeat(client: httpx.AsyncClient, instance_id: str, engine_state: str) -> httpx.Response:
    return await client.post(
        "/controller/heartbeat",
        json={"instance_id": instance_id, "engine_state": engine_state},
        headers=credential(instance_id),
    )


async def wait_status(
    client: httpx.AsyncClient, instance_id: str, wanted: str | None, timeout: float = 10
) -> None:
    async with asyncio.timeout(timeout):
        while await status_of(client, instance_id) != wanted:
            await asyncio.sleep(0.05)


def controller_config(tmp_path: Path, overrides: dict[str, Any] | None = None) -> ConfigPair:
    return sim_config(tmp_path / "config", pool=False, overrides=overrides or FAST)


@contextlib.asynccontextmanager
async def controller_client(
    tmp_path: Path,
    control_plane: ControlPlane,
    *recorders: RefreshRecorder,
    overrides: dict[str, Any] | None = None,
    timeout: float = 5,
) -> AsyncIterator[tuple[httpx.AsyncClient, ConfigPair]]:
    """A controller process (the sim example without a pool, `overrides` or FAST) pushing to `recorders` (the
    test starts them), a client of its API and the config (its node managers' addresses)."""
    config = controller_config(tmp_path, overrides)
    control_plane.controller(config, coordinators=",".join(recorder.url for recorder in recorders))
    async with httpx.AsyncClient(base_url=config.controller_url, timeout=timeout) as client:
        yield client, config


async def test_every_controller_call_needs_its_credential(
    tmp_path: Path, control_plane: ControlPlane, refresh_recorder: Callable[..., RefreshRecorder]
) -> None:
    """Registrations and heartbeats need the instance's credential (not the token, not another instance's);
    everything else under /controller/ needs the token. tests/security covers the attacks."""
    recorder = refresh_recorder()
    await recorder.start()
    async with controller_client(tmp_path, control_plane, recorder) as (client, config):
        body = registration(config)
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}, AUTH):
            response = await client.post("/controller/register", json=body, headers=headers)
            assert response.status_code == 401, response.text
            assert response.json()["error"]["code"] == "invalid_token"
        for path, body in (
            ("/controller/heartbeat", {"instance_id": "prefill-0", "engine_state": "healthy"}),
            ("/controller/terminate_instance", {"instance_id": "prefill-0"}),
        ):
            assert (await client.post(path, json=body)).status_code == 401
        assert (await client.get("/controller/instances")).status_code == 401
        assert (await state(client)).instances == []

        response = await register(client, config)
        assert response.status_code == 200
        assert InstanceAck.model_validate(response.json()).status == "initial"
        bad = await client.post("/controller/register", json={"instance_id": "x"}, headers=credential("x"))
        assert bad.status_code == 400
        assert bad.json()["error"]["type"] == "invalid_request_error"
        for probe in ("/startup", "/readiness", "/liveness"):
            assert (await client.get(probe)).status_code == 200


async def test_lifecycle_follows_heartbeats_engine_health_and_timeouts(
    tmp_path: Path, control_plane: ControlPlane, refresh_recorder: Callable[..., RefreshRecorder]
) -> None:
    recorder = refresh_recorder()
    await recorder.start()
    async with controller_client(tmp_path, control_plane, recorder) as (client, config):
        ack = await register(client, config, state="starting")
        assert ack.json()["status"] == "initial"
        assert (await heartbeat(client, "prefill-0", "starting")).json()["status"] == "initial"

        # initial → active on the first healthy heartbeat, pushed as add
        assert (await heartbeat(client, "prefill-0", "healthy")).json()["status"] == "active"
        await recorder.wait_for(lambda r: r.routable() == {"prefill-0"})
        assert any(e.event == "add" and e.instances[0].id == "prefill-0" for e in recorder.events)

        # active → inactive when the engine is unhealthy, pushed as del; back to active when healthy again
        assert (await heartbeat(client, "prefill-0", "unhealthy")).json()["status"] == "inactive"
        await recorder.wait_for(lambda r: r.routable() == set())
        assert any(e.event == "del" for e in recorder.events)
        assert (await heartbeat(client, "prefill-0", "healthy")).json()["status"] == "active"
        await recorder.wait_for(lambda r: r.routable() == {"prefill-0"})

        # active → inactive after instance_heartbeat_timeout of silence ...
        await wait_status(client, "prefill-0", "inactive")
        await recorder.wait_for(lambda r: r.routable() == set())
        # ... and deleted after instance_expired_timeout; the next heartbeat is told to register again
        await wait_status(client, "prefill-0", None)
        response = await heartbeat(client, "prefill-0", "healthy")
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "unknown_instance"

        # an instance that never became healthy expires from initial too
        await register(client, config, "decode-0")
        await wait_status(client, "decode-0", "initial", timeout=1)
        await wait_status(client, "decode-0", None)


async def test_heartbeats_keep_an_instance_active(
    tmp_path: Path, control_plane: ControlPlane, refresh_recorder: Callable[..., RefreshRecorder]
) -> None:
    recorder = refresh_recorder()
    await recorder.start()
    async with controller_client(tmp_path, control_plane, recorder) as (client, config):
        await register(client, config, state="healthy")
        for _ in range(12):  # 3 s: longer than both timeouts, one beat every 0.25 s
            assert (await heartbeat(client, "prefill-0", "healthy")).json()["status"] == "active"
            await asyncio.sleep(0.25)
        view = (await state(client)).instances[0]
        assert view.instance.status == "active"
        assert view.registrations == 1


async def test_terminate_stops_routing_and_forgets_the_instance(
    tmp_path: Path, control_plane: ControlPlane, refresh_recorder: Callable[..., RefreshRecorder]
) -> None:
    recorder = refresh_recorder()
    await recorder.start()
    async with controller_client(tmp_path, control_plane, recorder, timeout=15) as (client, config):
        await register(client, config, state="healthy")
        await recorder.wait_for(lambda r: r.routable() == {"prefill-0"})
        response = await client.post(
            "/controller/terminate_instance",
            json={"instance_id": "prefill-0", "reason": "test"},
            headers=AUTH,
        )
        assert response.status_code == 200
        # nothing listens at the registration's node manager address
        assert response.json() == {"instance_id": "prefill-0", "node_manager_stopped": False}
        await recorder.wait_for(lambda r: r.routable() == set())
        assert await status_of(client, "prefill-0") is None
        unknown = await client.post(
            "/controller/terminate_instance", json={"instance_id": "prefill-0"}, headers=AUTH
        )
        assert unknown.status_code == 404


async def test_controller_refuses_to_start_without_a_token(
    tmp_path: Path, control_plane: ControlPlane
) -> None:
    config = controller_config(tmp_path)
    with pytest.raises(RuntimeError, match="MOTOR_CONTROLLER_TOKEN is not set"):
        control_plane.controller(config, coordinators="http://127.0.0.1:9", token="")
