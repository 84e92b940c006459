"""The job supervisor of a locally deployed examples/sim: every component killed in turn comes back and the job
serves again (the restarted Mooncake master included, its pool used again); a killed supervisor leaves the job
serving and `motor stop` still stops all of it; scaling 1P+1D → 2P+2D → 1P+1D under a steady stream loses no
request; a config update restarts only the component whose spec changed."""

import asyncio
import io
import json
import os
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from motor.cli import local_job, local_status
from motor.pool.metrics import scrape_pool
from motor.protocol.controller import ControllerState, bearer
from motor.runtime.processes import start_ticks
from tests.fixtures.control import LocalRun, pid_alive
from tests.fixtures.streams import whole_stream
from tests.integration.test_local_deploy import descendants, serve_and_check_handover

PROMPT = " ".join(f"word{i}" for i in range(48))
KILLED_IN_TURN = ("controller", "coordinator", "prefill-0", "kv-pool")


def wait_until(condition: Callable[[], bool], timeout: float = 60.0, what: str = "") -> float:
    """Poll `condition` until it holds; the seconds it took."""
    began = time.monotonic()
    while not condition():
        assert time.monotonic() - began < timeout, f"not within {timeout:g} s: {what}"
        time.sleep(0.05)
    return time.monotonic() - began


def record(run: LocalRun, name: str) -> dict[str, Any]:
    return next(c for c in run.state()["components"] if c["name"] == name)


def instances(run: LocalRun) -> dict[str, str]:
    state = run.state()
    try:
        answer = httpx.get(
            f"{state['controller_url']}/controller/instances", headers=bearer(state["token"]), timeout=2
        )
        views = ControllerState.model_validate(answer.json()).instances
    except (httpx.HTTPError, ValueError):
        return {}
    return {view.instance.id: view.instance.status for view in views}


def answered(run: LocalRun) -> bool:
    body = {"model": "sim-model", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 4}
    try:
        return httpx.post(f"{run.api_url}/v1/chat/completions", json=body, timeout=10).status_code == 200
    except httpx.HTTPError:
        return False


def serving(run: LocalRun, names: set[str]) -> bool:
    """Every instance in `names` active (and no other) and a request answered."""
    found = instances(run)
    return set(found) == names and all(status == "active" for status in found.values()) and answered(run)


def group_pids(run: LocalRun, names: list[str]) -> dict[int, int]:
    """pid → start ticks of the named components and everything below them (engine servers, engines)."""
    leaders = [record(run, name)["pid"] for name in names]
    return {pid: start_ticks(pid) or 0 for leader in leaders for pid in [leader, *descendants(leader)]}


def still_running(pids: dict[int, int]) -> list[int]:
    return [pid for pid, ticks in pids.items() if start_ticks(pid) == ticks]


@pytest.mark.slow
def test_every_killed_component_is_restarted_and_the_job_serves_again(
    local_run: Callable[..., LocalRun],
) -> None:
    run = local_run()
    assert run.plan_and_deploy() == 0
    everyone = {"prefill-0", "decode-0"}
    recovery: dict[str, tuple[float, float]] = {}
    for name in KILLED_IN_TURN:
        killed = record(run, name)["pid"]
        below = group_pids(run, [name])  # e.g. a node manager's engine server and engine: no orphans after
        began = time.monotonic()
        os.kill(killed, signal.SIGKILL)
        wait_until(lambda: not pid_alive(killed), 10, f"{name} gone")  # noqa: B023
        back = wait_until(
            lambda: (r := record(run, name))["pid"] != killed and r["state"] == "healthy",  # noqa: B023
            what=f"{name} restarted and healthy",
        )
        wait_until(lambda: serving(run, everyone), what=f"serving again after {name} was killed")
        recovery[name] = (back, time.monotonic() - began)
        assert record(run, name)["restarts"] == 1
        assert still_running(below) == []
    print(
        "kill -9 → restarted and healthy / serving again (s):",
        {k: f"{a:.1f}/{b:.1f}" for k, (a, b) in recovery.items()},
    )

    # the restarted master is the pool again: the prefill writes a fresh prompt's KV into it, the decode reads it
    serve_and_check_handover(run)
    pool_metrics_url = run.state()["pool_metrics_url"]
    # Each engine's store client re-registers with the restarted master on its own ping cycle, not at once.
    wait_until(
        lambda: scrape_pool(pool_metrics_url).active_clients == 2,
        30,
        "both engines' store clients registered with the restarted master",
    )
    pool = scrape_pool(pool_metrics_url)
    assert pool.put_requests > 0 and pool.get_hits > 0

    table = io.StringIO()
    assert local_status.status(run.run_root, run.job_id, out=table) == 0
    shown = table.getvalue()
    assert re.search(r"job supervisor pid \d+: running", shown), shown
    for name in KILLED_IN_TURN:
        assert re.search(rf"^{re.escape(name)}\s.*running.*\s1\s*$", shown, re.MULTILINE), shown
    assert re.search(r"^decode-0\s.*running\s+0\s*$", shown, re.MULTILINE), shown
    logs = io.StringIO()
    assert local_job.logs(run.run_root, run.job_id, "supervisor", lines=1000, out=logs) == 0
    supervisor_log = logs.getvalue()
    for name in KILLED_IN_TURN:
        assert re.search(rf"{re.escape(name)} \(pid \d+\) exited with code -9", supervisor_log), (
            supervisor_log
        )


@pytest.mark.slow
def test_a_killed_supervisor_leaves_the_job_serving_and_stop_still_cleans_up(
    local_run: Callable[..., LocalRun], capsys: pytest.CaptureFixture[str]
) -> None:
    run = local_run(pool=False)
    assert run.plan_and_deploy() == 0
    supervisor = run.state()["supervisor"]
    os.kill(supervisor["pid"], signal.SIGKILL)
    wait_until(lambda: not pid_alive(supervisor["pid"]), 10, "supervisor gone")

    recorded = group_pids(run, list(run.pids()))
    assert len(recorded) >= len(run.pids()) + 4  # an engine server and its engine per instance
    assert all(answered(run) for _ in range(3))
    table = io.StringIO()
    assert local_status.status(run.run_root, run.job_id, out=table) == 1
    assert f"job supervisor (pid {supervisor['pid']}) is GONE" in table.getvalue()
    capsys.readouterr()
    assert run.update({"motor_deploy_config": {"d_instances_num": 2}}, scale=True) == 1
    assert "supervisor of 'motor-sim' is gone" in capsys.readouterr().err

    assert local_job.stop(run.run_root, run.job_id) == 0
    assert "is gone: stopping the recorded processes" in capsys.readouterr().out
    assert still_running(recorded) == []
    assert not (run.run_dir / "state.json").exists() and not (run.run_dir / "job.json").exists()


@dataclass
class Stream:
    """A steady client: each worker sends one request after the other, streamed and not in turn."""

    answered: int = 0
    failures: list[str] = field(default_factory=list)

    async def run(self, run: LocalRun, stop: asyncio.Event, workers: int = 3) -> None:
        async with httpx.AsyncClient(base_url=run.api_url, timeout=30) as client:
            await asyncio.gather(*(self._worker(client, offset, stop) for offset in range(workers)))

    async def _worker(self, client: httpx.AsyncClient, index: int, stop: asyncio.Event) -> None:
        while not stop.is_set():
            index += 1
            body = {"model": "sim-model", "prompt": f"{index} {PROMPT}", "max_tokens": 8}
            try:
                if index % 2:
                    await whole_stream(client, {**body, "stream": True}, 8)
                else:
                    answer = await client.post("/v1/completions", json=body)
                    if answer.status_code != 200 or answer.json()["usage"]["completion_tokens"] != 8:
                        raise RuntimeError(f"HTTP {answer.status_code}: {answer.text[:300]}")
            except (httpx.HTTPError, RuntimeError, ValueError, KeyError) as exc:
                self.failures.append(f"{type(exc).__name__}: {exc}")
                continue
            self.answered += 1


def engine_requests(run: LocalRun, name: str) -> float:
    """Requests the engine of instance `name` finished (its vllm:request_success counter)."""
    port = record(run, name)["ports"]["engine"]
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "vllm:request_success_total"
    )


def counts(prefill: int, decode: int) -> dict[str, Any]:
    return {"motor_deploy_config": {"p_instances_num": prefill, "d_instances_num": decode}}


@pytest.mark.slow
async def test_scaling_up_and_back_under_a_steady_stream_loses_no_request(
    local_run: Callable[..., LocalRun], capsys: pytest.CaptureFixture[str]
) -> None:
    run = local_run()
    assert await asyncio.to_thread(run.plan_and_deploy) == 0
    first = {name: record(run, name)["pid"] for name in run.pids()}
    stream, stop = Stream(), asyncio.Event()
    load = asyncio.create_task(stream.run(run, stop))
    try:
        await asyncio.to_thread(wait_until, lambda: stream.answered >= 10, 60, "first answers")
        assert await asyncio.to_thread(run.update, counts(2, 2), scale=True) == 0
        out = capsys.readouterr().out
        assert "started prefill-1, decode-1" in out and "scaled job motor-sim to 2 prefill, 2 decode" in out
        grown = run.pids()
        assert {name: grown[name] for name in first} == first  # nothing that ran was restarted
        assert set(instances(run).values()) == {"active"} and len(instances(run)) == 4
        await asyncio.to_thread(
            wait_until,
            lambda: engine_requests(run, "prefill-1") > 0 and engine_requests(run, "decode-1") > 0,
            60,
            "traffic on the new instances",
        )
        leaving = group_pids(run, ["prefill-1", "decode-1"])

        assert await asyncio.to_thread(run.update, counts(1, 1), scale=True) == 0
        out = capsys.readouterr().out
        assert "draining prefill-1" in out and "stopped decode-1" in out
        # the instances drain at once: both drains begin before either ends
        drains = [out.index(f"draining {name}") for name in ("prefill-1", "decode-1")]
        assert max(drains) < min(out.index(f"stopped {name}") for name in ("prefill-1", "decode-1"))
        assert still_running(leaving) == []
        assert run.pids() == first and set(instances(run)) == {"prefill-0", "decode-0"}
        served = stream.answered
        await asyncio.to_thread(wait_until, lambda: stream.answered >= served + 10, 60, "answers after")
    finally:
        stop.set()
        await load
    assert stream.failures == [], stream.failures[:5]
    config = json.loads((run.run_dir / "config" / "user_config.json").read_text())
    assert config["motor_deploy_config"]["p_instances_num"] == 1  # the baseline of the next update
    assert not (run.run_dir / "config" / "prefill-1.spec.json").exists()


@pytest.mark.slow
def test_a_config_update_restarts_only_the_components_whose_spec_changed(
    local_run: Callable[..., LocalRun], capsys: pytest.CaptureFixture[str]
) -> None:
    run = local_run(pool=False)
    assert run.plan_and_deploy() == 0
    before = run.pids()
    engines = {name: group_pids(run, [name]) for name in ("prefill-0", "decode-0")}
    capsys.readouterr()

    timeout = {"motor_coordinator_config": {"exception_config": {"first_token_timeout": 61}}}
    assert run.update(timeout, scale=False) == 0
    out = capsys.readouterr().out
    assert "restarting coordinator: its spec changed" in out and "restarted: coordinator" in out
    after = run.pids()
    assert [name for name in before if before[name] != after[name]] == ["coordinator"]
    assert {name: still_running(pids) for name, pids in engines.items()} == {
        name: list(pids) for name, pids in engines.items()
    }
    spec = json.loads((run.run_dir / "config" / "coordinator.spec.json").read_text())
    assert spec["config"]["exception_config"]["first_token_timeout"] == 61
    assert serving(run, {"prefill-0", "decode-0"})

    # a node manager's log level waits for its next restart: its engine is not restarted for it
    assert (
        run.update({"motor_nodemanger_config": {"logging_config": {"log_level": "DEBUG"}}}, scale=False) == 0
    )
    out = capsys.readouterr().out
    assert "restarted: nothing" in out and "takes effect when they next restart: prefill-0, decode-0" in out
    assert run.pids() == after

    # what needs a redeploy is refused, naming the path; nothing changes
    api = run.config.doc["motor_controller_config"]["api_config"]
    moved = {
        "motor_controller_config": {"api_config": {"controller_api_port": api["controller_api_port"] + 100}}
    }
    assert run.update(moved, scale=False) == 1
    assert "motor_controller_config.api_config.controller_api_port" in capsys.readouterr().err
    assert run.update(counts(1, 2), scale=False) == 1
    assert "change instance counts with --update-instance-num" in capsys.readouterr().err
    assert run.pids() == after
