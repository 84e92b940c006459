"""No instance change is lost: pushes are retried until each coordinator acknowledges them, a coordinator
that comes up late receives the full set, and every coordinator converges to the controller's active set."""

import asyncio
from collections.abc import Callable
from pathlib import Path

import httpx

from motor.protocol.controller import ControllerState, bearer
from motor.runtime.net import free_port_block
from tests.fixtures.control import TOKEN, ControlPlane, RefreshRecorder
from tests.integration.test_controller_lifecycle import controller_client, heartbeat, register

AUTH = bearer(TOKEN)


async def links(client: httpx.AsyncClient) -> ControllerState:
    response = await client.get("/controller/instances", headers=AUTH)
    response.raise_for_status()
    return ControllerState.model_validate(response.json())


async def test_failed_pushes_are_retried_until_acknowledged(
    tmp_path: Path, control_plane: ControlPlane, refresh_recorder: Callable[..., RefreshRecorder]
) -> None:
    flaky = refresh_recorder(fail_first=6)
    steady = refresh_recorder()
    await flaky.start()
    await steady.start()
    # no timeouts and no reconciliation during the test: only the retries can deliver
    quiet = {
        "motor_controller_config": {
            "instance_config": {"instance_heartbeat_timeout": 60},
            "event_config": {"coordinator_heartbeat_interval": 60},
        }
    }
    async with controller_client(tmp_path, control_plane, flaky, steady, overrides=quiet) as (client, config):
        for instance_id in ("prefill-0", "decode-0"):
            await register(client, config, instance_id)
            await heartbeat(client, instance_id, "healthy")
        await heartbeat(client, "decode-0", "unhealthy")

        await steady.wait_for(lambda r: r.routable() == {"prefill-0"})
        await flaky.wait_for(lambda r: r.routable() == {"prefill-0"})
        assert flaky.calls > flaky.fail_first
        state = await links(client)
        flaky_link = next(link for link in state.coordinators if link.url == flaky.url)
        assert not flaky_link.pending
        assert flaky_link.version == flaky.version
        # the steady coordinator got every change as it happened, in order
        assert [(e.event, [i.id for i in e.instances]) for e in steady.events] == [
            ("set", []),
            ("add", ["prefill-0"]),
            ("add", ["decode-0"]),
            ("del", ["decode-0"]),
        ]


async def test_a_coordinator_that_starts_late_gets_the_full_set(
    tmp_path: Path, control_plane: ControlPlane, refresh_recorder: Callable[..., RefreshRecorder]
) -> None:
    late = refresh_recorder(port=free_port_block(1))
    async with controller_client(tmp_path, control_plane, late) as (client, config):  # not started yet
        await register(client, config, state="healthy")
        async with asyncio.timeout(10):
            while not (await links(client)).coordinators[0].last_error:
                await asyncio.sleep(0.05)
        await late.start()
        await late.wait_for(lambda r: r.routable() == {"prefill-0"})
        assert late.events[0].event == "set"


async def test_reconciliation_repairs_a_coordinator_that_lost_its_state(
    tmp_path: Path, control_plane: ControlPlane, refresh_recorder: Callable[..., RefreshRecorder]
) -> None:
    recorder = refresh_recorder()
    await recorder.start()
    keep_alive = {
        "motor_controller_config": {
            "instance_config": {"instance_heartbeat_timeout": 30},
            "event_config": {"coordinator_heartbeat_interval": 0.5},
        }
    }
    async with controller_client(tmp_path, control_plane, recorder, overrides=keep_alive) as (client, config):
        await register(client, config, state="healthy")
        await recorder.wait_for(lambda r: r.routable() == {"prefill-0"})
        recorder.view.clear()  # as if the coordinator restarted
        await recorder.wait_for(lambda r: r.routable() == {"prefill-0"})
        assert recorder.events[-1].event == "set"


async def test_a_stopped_heartbeat_is_answered_once_the_coordinators_stopped_routing(
    tmp_path: Path, control_plane: ControlPlane, refresh_recorder: Callable[..., RefreshRecorder]
) -> None:
    recorder = refresh_recorder()
    await recorder.start()
    async with controller_client(tmp_path, control_plane, recorder) as (client, config):
        await register(client, config, state="healthy")
        await recorder.wait_for(lambda r: r.routable() == {"prefill-0"})
        # the coordinator refuses the next two pushes: the `del` is acknowledged only by the retry after them
        recorder.fail_first = recorder.calls + 2
        response = await heartbeat(client, "prefill-0", "stopped")
        assert response.status_code == 200 and response.json()["status"] == "inactive"
        assert recorder.calls > recorder.fail_first and recorder.routable() == set()
