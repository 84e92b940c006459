"""The planner on a real local sim job (capacity model; tests/fixtures/planner.py): it grows the decode side
under load and drains it away under load without losing a request, stays within its bounds, survives its own
restart in the middle of a change, and converges while an engine is killed under it (docs/planner.md)."""

import asyncio
import io
import json
import os
import signal
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from motor.cli import local_status
from tests.fixtures.control import LocalRun
from tests.fixtures.planner import (
    deployed_under_load,
    engine_pid,
    planner_overrides,
    planner_status,
    planner_url,
    wait_for_counts,
    without_latency_model,
)
from tests.fixtures.waits import wait_until

pytestmark = pytest.mark.slow


def planned_run(local_run: Callable[..., LocalRun], **planner: object) -> LocalRun:
    return without_latency_model(local_run(pool=False, overrides=planner_overrides(dict(planner))))


def journal(run: LocalRun) -> list[dict[str, object]]:
    path = run.run_dir / "planner" / "changes.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def decisions_total(run: LocalRun) -> dict[str, float]:
    text = httpx.get(f"{planner_url(run)}/metrics", timeout=5).text
    return {
        sample.labels["kind"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "motor_planner_decisions_total"
    }


async def test_decode_grows_under_load_and_is_drained_away_under_load_losing_nothing(
    local_run: Callable[..., LocalRun],
) -> None:
    run = planned_run(local_run)
    async with deployed_under_load(run) as load:
        grown = await asyncio.to_thread(
            wait_for_counts, run, lambda counts: counts["decode"] >= 2, "the decode side grown", 45
        )
        # the decode instances the planner added are drained while streams still run
        load.clients, load.pause_s = 2, 1.0
        shrunk = await asyncio.to_thread(
            wait_for_counts, run, lambda counts: counts["decode"] == 1, "the decode side drained", 45
        )
    assert load.failures == [], load.failures[:5]
    assert load.answered > 50
    assert sum(grown["counts"].values()) <= 4 and grown["counts"]["decode"] <= 3
    assert shrunk["counts"] == {"prefill": 1, "decode": 1}
    changes = [entry for entry in journal(run) if entry["event"] == "change"]
    print("\n".join(f"{entry['kind']}: {entry['reason']}" for entry in changes))
    assert changes[0]["kind"] == "scale" and "decode needs" in str(changes[0]["reason"])
    assert all(entry["event"] != "failed" for entry in journal(run))
    assert decisions_total(run)["scale"] >= 2
    shown = io.StringIO()
    assert local_status.status(run.run_root, run.job_id, out=shown) == 0
    assert "planner: targets 1P+1D (runs 1P+1D, active 1P+1D)" in shown.getvalue()
    assert "the planner's latest decisions" in shown.getvalue() and "decode needs" in shown.getvalue()


def change_begun(run: LocalRun) -> dict[str, Any]:
    return wait_until(lambda: planner_status(run), lambda s: bool(s.get("applying")), "a change begun", 45)


async def test_a_planner_killed_mid_change_is_restarted_reports_it_and_converges(
    local_run: Callable[..., LocalRun],
) -> None:
    run = planned_run(local_run)
    async with deployed_under_load(run) as load:
        status = await asyncio.to_thread(change_begun, run)
        pid = run.pids()["planner"]
        os.kill(pid, signal.SIGKILL)
        restarted = await asyncio.to_thread(
            wait_until,
            lambda: planner_status(run),
            lambda s: bool(s) and run.pids()["planner"] != pid,
            "the planner restarted by the supervisor",
            30,
        )
        assert restarted["interrupted"] and status["applying"].split(" → ")[1] in restarted["interrupted"]
        assert restarted["decisions"] and restarted["decisions"][0]["kind"] in ("scale", "convert")
        await asyncio.to_thread(
            wait_for_counts, run, lambda counts: counts["decode"] >= 2, "the change finished or redone", 45
        )
    assert load.failures == [], load.failures[:5]


async def test_an_engine_killed_while_the_planner_scales_loses_nothing_and_the_planner_converges(
    local_run: Callable[..., LocalRun],
) -> None:
    run = planned_run(local_run)
    async with deployed_under_load(run) as load:
        await asyncio.to_thread(change_begun, run)
        killed = engine_pid(run, "decode-0")
        assert killed is not None
        os.kill(killed, signal.SIGKILL)
        converged = await asyncio.to_thread(
            wait_for_counts, run, lambda counts: counts["decode"] >= 2, "the planner converged", 60
        )
        assert engine_pid(run, "decode-0") not in (None, killed)
    assert load.failures == [], load.failures[:5]
    assert converged["active"] == converged["counts"]
