"""Node managers as real processes with real (sim) engines under the engine server, and a real controller:
registration, health, restart with backoff after a crash, re-registration, terminate and SIGTERM."""

import asyncio
import os
import signal
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from motor.protocol.controller import ControllerState, bearer
from motor.protocol.node_manager import NodeManagerStatus
from tests.fixtures.control import TOKEN, ConfigPair, ControlPlane, RefreshRecorder, pid_alive, sim_config

AUTH = bearer(TOKEN)
TIMEOUTS = {
    "motor_controller_config": {
        "instance_config": {
            "instance_heartbeat_timeout": 3,
            "instance_expired_timeout": 60,
            "instance_manager_check_interval": 0.2,
        }
    },
    "motor_nodemanger_config": {"basic_config": {"heartbeat_interval_seconds": 0.5}},
}


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(child) for child in text.split()]


async def nm_status(url: str) -> NodeManagerStatus:
    async with httpx.AsyncClient(timeout=5) as client:
        response = await client.get(f"{url}/node-manager/status")
        return NodeManagerStatus.model_validate(response.json())


async def controller_state(config: ConfigPair) -> ControllerState:
    async with httpx.AsyncClient(timeout=5) as client:
        response = await client.get(f"{config.controller_url}/controller/instances", headers=AUTH)
        return ControllerState.model_validate(response.json())


async def wait_until(check: Callable[[], "asyncio.Future[bool]"], timeout: float = 30.0) -> None:
    async with asyncio.timeout(timeout):
        while not await check():
            await asyncio.sleep(0.1)


async def instance_status(config: ConfigPair, instance_id: str) -> str | None:
    for view in (await controller_state(config)).instances:
        if view.instance.id == instance_id:
            return view.instance.status
    return None


async def wait_status(
    config: ConfigPair, instance_id: str, wanted: str | None, timeout: float = 30.0
) -> None:
    async def reached() -> bool:
        return await instance_status(config, instance_id) == wanted

    await wait_until(reached, timeout)


@pytest.fixture
async def running(
    tmp_path: Path, control_plane: ControlPlane, refresh_recorder: Callable[..., RefreshRecorder]
) -> tuple[ConfigPair, RefreshRecorder]:
    recorder = refresh_recorder()
    await recorder.start()
    config = sim_config(tmp_path / "config", pool=False, overrides=TIMEOUTS)
    control_plane.controller(config, coordinators=recorder.url)
    control_plane.node_manager(config, "prefill", 0, k=0)
    await wait_status(config, "prefill-0", "active")
    await recorder.wait_for(lambda r: r.routable() == {"prefill-0"})
    return config, recorder


async def test_node_manager_runs_restarts_and_stops_its_engine(
    running: tuple[ConfigPair, RefreshRecorder], control_plane: ControlPlane
) -> None:
    """One node manager through its life (one engine start serves every step): serve, crash, new controller,
    SIGTERM."""
    await check_registered_engine_serves(*running)
    await check_crashed_engine_is_restarted(*running)
    await check_registers_again_with_a_new_controller(*running, control_plane)
    await check_sigterm_stops_the_engine(*running, control_plane)


async def check_registered_engine_serves(config: ConfigPair, recorder: RefreshRecorder) -> None:
    status = await nm_status(config.node_manager_url(0))
    assert status.registered and status.engine_state == "healthy" and status.engine_restarts == 0
    instance = recorder.view["prefill-0"]
    assert (
        instance.role == "prefill"
        and instance.engine_id == "prefill-0"
        and instance.model_name == "sim-model"
    )
    endpoint = instance.endpoints[0]
    async with httpx.AsyncClient(timeout=10) as client:
        models = await client.get(f"{endpoint.base_url}/v1/models")
        assert models.json()["data"][0]["id"] == "sim-model"
        engine_status = await client.get(f"http://{endpoint.host}:{endpoint.status_port}/status")
        assert engine_status.json() == {"status": "normal"}
        for probe in ("/startup", "/readiness", "/liveness"):
            assert (await client.get(f"{config.node_manager_url(0)}{probe}")).status_code == 200


async def check_crashed_engine_is_restarted(config: ConfigPair, recorder: RefreshRecorder) -> None:
    wrapper = (await nm_status(config.node_manager_url(0))).engine_pid
    assert wrapper is not None
    (engine,) = children(wrapper)
    os.kill(engine, signal.SIGKILL)

    await wait_status(config, "prefill-0", "inactive")
    await recorder.wait_for(lambda r: "prefill-0" not in r.routable())
    await wait_status(config, "prefill-0", "active")
    await recorder.wait_for(lambda r: r.routable() == {"prefill-0"})
    status = await nm_status(config.node_manager_url(0))
    assert status.engine_restarts == 1
    assert status.engine_pid != wrapper and not pid_alive(wrapper) and not pid_alive(engine)
    events = [(e.event, [i.id for i in e.instances]) for e in recorder.events if e.event != "set"]
    assert events == [("add", ["prefill-0"]), ("del", ["prefill-0"]), ("add", ["prefill-0"])]


async def check_registers_again_with_a_new_controller(
    config: ConfigPair, recorder: RefreshRecorder, control_plane: ControlPlane
) -> None:
    controller = next(p for p in control_plane.processes if p.name == "controller")
    controller.stop(signal.SIGKILL)
    control_plane.controller(config, coordinators=recorder.url, name="controller-2")
    await wait_status(config, "prefill-0", "active")
    (view,) = (await controller_state(config)).instances
    assert view.registrations == 1  # without persistence the new controller learns it from a registration
    assert (
        "registering again" in next(p for p in control_plane.processes if p.name == "nm-prefill-0").log_text()
    )


async def test_terminate_stops_the_engine_and_the_node_manager(
    running: tuple[ConfigPair, RefreshRecorder], control_plane: ControlPlane
) -> None:
    config, recorder = running
    node_manager = next(p for p in control_plane.processes if p.name == "nm-prefill-0")
    wrapper = (await nm_status(config.node_manager_url(0))).engine_pid
    assert wrapper is not None
    engines = children(wrapper)
    async with httpx.AsyncClient(timeout=60) as client:
        unauthorized = await client.post(f"{config.node_manager_url(0)}/node-manager/stop", json={})
        assert unauthorized.status_code == 401
        response = await client.post(
            f"{config.controller_url}/controller/terminate_instance",
            json={"instance_id": "prefill-0", "reason": "test"},
            headers=AUTH,
        )
    assert response.json() == {"instance_id": "prefill-0", "node_manager_stopped": True}
    await recorder.wait_for(lambda r: r.routable() == set())
    assert node_manager.process.wait(timeout=30) == 0
    assert not any(pid_alive(pid) for pid in [wrapper, *engines])
    assert await instance_status(config, "prefill-0") is None


async def check_sigterm_stops_the_engine(
    config: ConfigPair, recorder: RefreshRecorder, control_plane: ControlPlane
) -> None:
    node_manager = next(p for p in control_plane.processes if p.name == "nm-prefill-0")
    wrapper = (await nm_status(config.node_manager_url(0))).engine_pid
    assert wrapper is not None
    engines = children(wrapper)
    assert node_manager.stop(signal.SIGTERM) == 0
    assert not any(pid_alive(pid) for pid in [wrapper, *engines])
    assert await instance_status(config, "prefill-0") == "inactive"  # the last heartbeat said "stopped"
    await recorder.wait_for(lambda r: r.routable() == set())


async def test_a_node_manager_with_a_wrong_credential_stops_its_engine_and_exits(
    tmp_path: Path, control_plane: ControlPlane, refresh_recorder: Callable[..., RefreshRecorder]
) -> None:
    recorder = refresh_recorder()
    await recorder.start()
    config = sim_config(tmp_path / "config", pool=False, overrides=TIMEOUTS)
    control_plane.controller(config, coordinators=recorder.url)
    try:
        node_manager = control_plane.node_manager(config, "prefill", 0, k=0, token="not-the-token")
    except RuntimeError as exc:  # it may already be gone when its port is first probed
        assert "refused this instance's credential (401)" in str(exc)
        return
    assert node_manager.process.wait(timeout=60) == 2
    assert "refused this instance's credential (401)" in node_manager.log_text()
    assert all(not pid_alive(pid) for pid in control_plane.engine_pids)
    assert (await controller_state(config)).instances == []
