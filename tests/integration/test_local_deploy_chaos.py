"""Kill the decode engine of a locally deployed examples/sim under load: the node manager restarts it, the
controller marks the instance inactive then active, the coordinator stops and resumes routing to it, and no
request fails before its first token."""

import asyncio
import json
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from motor.protocol.controller import ControllerState, bearer
from tests.fixtures.control import LocalRun, pid_alive

SLOW_DECODE = {
    "motor_engine_decode_config": {"engine_config": {"itl_ms": 20}},
    "motor_engine_prefill_config": {"engine_config": {"itl_ms": 20}},
}
PROMPT = " ".join(f"token{i}" for i in range(64))


@dataclass
class Outcomes:
    completed: int = 0
    interrupted_after_first_token: int = 0
    lost_before_first_token: list[str] = field(default_factory=list)


@dataclass
class Observed:
    statuses: list[str] = field(default_factory=list)  # decode-0 as the controller sees it, on change
    routed: list[bool] = field(default_factory=list)  # decode-0 in the coordinator's instance set, on change
    restarts: int = 0


async def one_request(client: httpx.AsyncClient, index: int, outcomes: Outcomes) -> None:
    body = {
        "model": "sim-model",
        "messages": [{"role": "user", "content": f"{index} {PROMPT}"}],
        "max_tokens": 20,
        "stream": True,
    }
    first_token = False
    try:
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            if response.status_code != 200:
                outcomes.lost_before_first_token.append(
                    f"HTTP {response.status_code}: {await response.aread()!r}"
                )
                return
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    raise RuntimeError(chunk["error"])
                if any(choice.get("delta", {}).get("content") for choice in chunk.get("choices", [])):
                    first_token = True
    except (httpx.HTTPError, RuntimeError) as exc:
        if first_token:
            outcomes.interrupted_after_first_token += 1
        else:
            outcomes.lost_before_first_token.append(f"{type(exc).__name__}: {exc}")
        return
    if first_token:
        outcomes.completed += 1
    else:
        outcomes.lost_before_first_token.append("stream ended without a token")


async def load(run: LocalRun, outcomes: Outcomes, stop: asyncio.Event, workers: int = 4) -> None:
    async with httpx.AsyncClient(base_url=run.api_url, timeout=60) as client:

        async def worker(offset: int) -> None:
            index = offset
            while not stop.is_set():
                await one_request(client, index, outcomes)
                index += workers

        await asyncio.gather(*(worker(i) for i in range(workers)))


async def observe(run: LocalRun, observed: Observed, stop: asyncio.Event) -> None:
    state = run.state()
    async with httpx.AsyncClient(timeout=5) as client:
        while not stop.is_set():
            response = await client.get(
                f"{state['controller_url']}/controller/instances", headers=bearer(state["token"])
            )
            views = ControllerState.model_validate(response.json()).instances
            decode = next((v for v in views if v.instance.id == "decode-0"), None)
            status = decode.instance.status if decode else "absent"
            if not observed.statuses or observed.statuses[-1] != status:
                observed.statuses.append(status)
            observed.restarts = decode.engine_restarts if decode else observed.restarts
            instances = (await client.get(f"{run.mgmt_url}/instances")).json()["instances"]
            routed = any(i["id"] == "decode-0" for i in instances)
            if not observed.routed or observed.routed[-1] != routed:
                observed.routed.append(routed)
            await asyncio.sleep(0.05)


def decode_engine_pid(run: LocalRun) -> int:
    """decode-0's sim engine: the child of the engine server its node manager recorded, checked by its command
    line (the simulator, with decode-0's engine id) so the kill cannot hit another process."""
    wrapper = json.loads((run.run_dir / "decode-0" / "engine.pid").read_text())["pid"]
    (engine,) = Path(f"/proc/{wrapper}/task/{wrapper}/children").read_text().split()
    argv = Path(f"/proc/{engine}/cmdline").read_bytes().decode().split("\0")
    transfer = json.loads(argv[argv.index("--kv-transfer-config") + 1])
    assert "motor.engine.sim" in argv and transfer["engine_id"] == "decode-0", argv
    return int(engine)


async def wait_until(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.05)


@pytest.mark.slow
async def test_killed_engine_is_restarted_and_no_request_is_lost_before_its_first_token(
    local_run: Callable[..., LocalRun],
) -> None:
    run = local_run(overrides=SLOW_DECODE)
    assert await asyncio.to_thread(run.plan_and_deploy) == 0
    outcomes, observed, stop = Outcomes(), Observed(), asyncio.Event()
    tasks = [
        asyncio.create_task(load(run, outcomes, stop)),
        asyncio.create_task(observe(run, observed, stop)),
    ]
    try:
        await wait_until(lambda: outcomes.completed >= 8)
        killed = decode_engine_pid(run)
        os.kill(killed, signal.SIGKILL)
        await wait_until(lambda: not pid_alive(killed), timeout=10)
        await wait_until(lambda: "inactive" in observed.statuses and observed.statuses[-1] == "active")
        recovered_at = outcomes.completed
        await wait_until(lambda: outcomes.completed >= recovered_at + 8)
    finally:
        stop.set()
        await asyncio.gather(*tasks)

    assert observed.statuses[:1] == ["active"] and observed.statuses[-1] == "active"
    assert observed.statuses.index("inactive") > 0
    assert observed.restarts == 1
    # routing stopped while the engine was down and resumed once it was back
    assert observed.routed[0] is True and False in observed.routed and observed.routed[-1] is True
    assert not outcomes.lost_before_first_token, outcomes.lost_before_first_token
