"""The dispatch state machine: its transition tables, the failure table, how an attempt settles a failure
(retry guard, budget, deadline, exclusions, cause), ends from outside, and the metrics its transitions feed.

Legs here are never sent (no engine): they are created, failed and aborted through the attempt's own methods;
tests/integration/test_coordinator_faults.py drives the same machine with sim engines.
"""

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from motor.config.models import CoordinatorConfig
from motor.coordinator.client_request import parse_request
from motor.coordinator.core import Core
from motor.coordinator.dispatch.dispatch import Dispatch
from motor.coordinator.dispatch.failures import (
    ABORTS,
    FAILURES,
    EngineRejected,
    LegFailure,
    no_instance,
    retryable_status,
)
from motor.coordinator.dispatch.states import (
    LEG_TRANSITIONS,
    OBSERVED_LEG_STATES,
    OBSERVED_PHASES,
    PHASE_TRANSITIONS,
    InvalidTransition,
    LegState,
    Phase,
)
from motor.coordinator.metrics import CoordinatorMetrics
from motor.coordinator.settings import CoordinatorSettings
from motor.kv.connectors import DispatchProfile
from motor.protocol.instances import InstanceEvent
from tests.unit.test_coordinator_dispatch import registry

FINAL_PHASES = {Phase.DONE, Phase.FAILED, Phase.RETRYING, Phase.ABORTED}
BEFORE_OUTPUT = {Phase.ADMITTED, Phase.DECODE, Phase.PREFILL, Phase.HANDOVER}


def reachable(table: dict[Any, frozenset[Any]], start: Any) -> set[Any]:
    seen, todo = {start}, [start]
    while todo:
        for state in table[todo.pop()]:
            if state not in seen:
                seen.add(state)
                todo.append(state)
    return seen


def test_the_phase_table_allows_retries_only_before_output() -> None:
    assert reachable(PHASE_TRANSITIONS, Phase.ADMITTED) == set(Phase)
    for phase in BEFORE_OUTPUT:
        assert {Phase.RETRYING, Phase.FAILED, Phase.ABORTED} <= PHASE_TRANSITIONS[phase], phase
    assert PHASE_TRANSITIONS[Phase.STREAMING] == {Phase.DONE, Phase.FAILED, Phase.ABORTED}
    for phase in FINAL_PHASES:
        assert not PHASE_TRANSITIONS[phase]
    # decode_first: the decode engine's callback starts the prefill after the decode leg was sent
    assert Phase.PREFILL in PHASE_TRANSITIONS[Phase.DECODE]
    # concurrent: the decode leg may produce output before the prefill's answer was read
    assert Phase.STREAMING in PHASE_TRANSITIONS[Phase.PREFILL]


def test_the_leg_table() -> None:
    assert reachable(LEG_TRANSITIONS, LegState.PICKED) == set(LegState)
    for state in (LegState.PICKED, LegState.SENT, LegState.RECEIVING):
        assert {LegState.FAILED, LegState.ABORTED} <= LEG_TRANSITIONS[state]
    assert LegState.RECEIVING not in LEG_TRANSITIONS[LegState.PICKED], "nothing is received before sending"
    for state in (LegState.DONE, LegState.FAILED, LegState.ABORTED):
        assert not LEG_TRANSITIONS[state]


def test_the_failure_table() -> None:
    for kind in ("connect", "timeout", "closed", "protocol", "cancelled"):  # every UpstreamError kind
        assert FAILURES[kind].retryable and FAILURES[kind].exclude_instance
    assert (FAILURES["timeout"].status, FAILURES["timeout"].stream_code) == (504, "read_timeout")
    assert (FAILURES["connect"].status, FAILURES["connect"].stream_code) == (502, "upstream_failed")
    assert FAILURES["no_instance"].retryable and not FAILURES["no_instance"].exclude_instance
    assert FAILURES["no_instance"].status == 503
    assert not FAILURES["engine_rejected"].retryable and not FAILURES["engine_rejected"].exclude_instance
    assert not FAILURES["infer_timeout"].retryable
    assert [retryable_status(s) for s in (500, 502, 503, 408, 429, 400, 404, 422)] == [True] * 5 + [False] * 3
    assert {kind: rule.status for kind, rule in ABORTS.items()} == {
        "client_gone": 499,
        "write_timeout": 408,
        "infer_timeout": 504,
        "shutdown": 499,
    }


# ---- attempts over a real Core (no engine is ever called) ----------------------------------------------------


@pytest.fixture
def prometheus() -> CollectorRegistry:
    return CollectorRegistry()


@asynccontextmanager
async def running_core(prometheus: CollectorRegistry, config: dict[str, Any]) -> AsyncIterator[Core]:
    """A started Core (prefill_first) with prefill-0, prefill-1 and decode-2 registered; no engine behind them."""
    settings = CoordinatorSettings(
        config=CoordinatorConfig.model_validate(config),
        profile=DispatchProfile.PREFILL_FIRST,
        advertise_host="127.0.0.1",
        bind_host="127.0.0.1",
        infer_port=0,
        mgmt_port=0,
        served_models=("m",),
        run_dir=None,
        controller_token=None,
        required_roles=("prefill", "decode"),
        engine_types=("sim",),
        owned_by="sim",
        spec_path=None,
    )
    result = Core(settings, CoordinatorMetrics(prometheus))
    await result.start("http://127.0.0.1:9")
    instances = registry("prefill", "prefill", "decode").snapshot()
    result.registry.apply(InstanceEvent(event="set", instances=instances))
    try:
        yield result
    finally:
        await result.stop()


@pytest.fixture
async def core(prometheus: CollectorRegistry) -> AsyncIterator[Core]:
    config = {"exception_config": {"max_retry": 2, "retry_delay": 0.25, "infer_timeout": 60}}
    async with running_core(prometheus, config) as result:
        yield result


def dispatch(core: Core, stream: bool = True) -> Dispatch:
    body = b'{"model": "m", "prompt": "hello there", "max_tokens": 4, "stream": %s}' % (
        b"true" if stream else b"false"
    )
    return Dispatch(core.dispatch_context, parse_request("completions", body, frozenset({"m"})), "req-1")


def metric(core: Core, prometheus: CollectorRegistry, name: str, **labels: str) -> float:
    core.metrics.flush()
    return prometheus.get_sample_value(name, labels) or 0.0


def idle(core: Core) -> bool:
    return all(
        (load["in_flight"], load["tokens"], load["kv_tokens"]) == (0, 0, 0)
        for load in core.scheduler.endpoint_load().values()
    )


async def test_a_leg_failure_before_output_is_retried_elsewhere_after_backoff(
    core: Core, prometheus: CollectorRegistry
) -> None:
    d = dispatch(core)
    attempt = d.new_attempt()
    prefill = attempt.prefill_leg(await attempt.pick("prefill"))
    decode = attempt.client_leg(await attempt.pick("decode"), 4, 10)
    assert not idle(core)
    failure = prefill.failed("http_status", "prefill answered 500", reason="http_500")
    assert prefill.state is LegState.FAILED and attempt.cause is failure
    assert attempt.fail(failure, core.retry_policy) == 0.25
    assert attempt.phase is Phase.RETRYING and attempt.failure is failure
    assert decode.state is LegState.ABORTED and idle(core)
    assert d.excluded("prefill") == {prefill.target.instance_id} and not d.excluded("decode")
    assert metric(core, prometheus, "motor_coordinator_retries_total", role="prefill", reason="http_500") == 1
    second = d.new_attempt()
    assert (second.number, second.engine_rid) == (1, b"req-1-retry1")
    assert await second.pick("prefill") is not prefill.target, "the retry avoids the instance that failed"
    assert core.retry_policy.next_delay(2) == 0.5


async def test_when_every_instance_failed_the_request_the_latest_failure_is_avoided(core: Core) -> None:
    d = dispatch(core)
    ids = sorted({t.instance_id for t in core.registry.targets("prefill")})
    assert len(ids) >= 2
    for instance_id in ids:
        d.exclude("prefill", instance_id)
    latest = ids[-1]
    picked = await d.new_attempt().pick("prefill")
    assert picked.instance_id != latest, "back to the instance that failed it last"
    d.exclude("prefill", picked.instance_id)
    assert (await d.new_attempt().pick("prefill")).instance_id != picked.instance_id


async def test_an_instance_that_looks_gone_is_not_tried_again_while_another_is_left(core: Core) -> None:
    """A replay's retries alternated between a live decode that timed out and the dead one that refused the
    connection, and ended on the dead one (CI, 2026-12-04): a gone instance is tried last."""
    d = dispatch(core)
    dead, alive = sorted({t.instance_id for t in core.registry.targets("prefill")})[:2]
    d.exclude("prefill", dead, gone=True)
    d.exclude("prefill", alive)
    for _ in range(3):
        picked = await d.new_attempt().pick("prefill")
        assert picked.instance_id != dead
        d.exclude("prefill", picked.instance_id)
    ids = {t.instance_id for t in core.registry.targets("prefill")}
    for instance_id in ids - {dead}:
        d.exclude("prefill", instance_id, gone=True)
    last_resort = await d.new_attempt().pick("prefill")  # raises when nothing is picked
    assert last_resort.instance_id in ids, "every instance looks gone: one is tried anyway"


def test_the_connect_and_closed_failures_mark_an_instance_gone() -> None:
    assert [k for k, rule in FAILURES.items() if rule.instance_gone] == ["connect", "closed"]


async def test_no_instance_is_retried_without_excluding_anything(core: Core) -> None:
    d = dispatch(core)
    attempt = d.new_attempt()
    assert attempt.fail(no_instance("decode", "gone"), core.retry_policy) == 0.25
    assert not d.excluded("decode") and attempt.phase is Phase.RETRYING


async def test_the_last_attempt_gives_up_with_the_count(core: Core) -> None:
    d = dispatch(core)
    for _ in range(2):
        attempt = d.new_attempt()
        assert attempt.fail(no_instance("prefill", "none"), core.retry_policy) is not None
    last = d.new_attempt()
    assert last.fail(no_instance("prefill", "none"), core.retry_policy) is None
    assert last.phase is Phase.FAILED and last.failure is not None
    assert last.failure.message == "none (gave up after 3 attempts)" and last.failure.status == 503


async def test_the_prefill_budget_applies_to_every_attempt_but_the_last(core: Core) -> None:
    # a stalled leg is moved to spare the request the wait; on the last attempt `max_retry` allows there is
    # nowhere to move it, and cutting it short would turn a slow answer into an error
    for endpoint in core.scheduler._loads.values():
        for _ in range(5):  # prefill_deadline_min_samples
            core.scheduler.prefill_answered(endpoint, 1000, 0.1)
    d = dispatch(core)
    for number in range(3):
        attempt = d.new_attempt()
        leg = attempt.prefill_leg(await attempt.pick("prefill"))
        if number < 2:
            assert not attempt.is_last() and leg.budget == 2.0  # the floor: 1 s + 4 × 3 tokens × 0.1 ms
            assert leg.deadline < attempt.prefill_deadline()
            assert attempt.fail(leg.failed("timeout", "no answer"), core.retry_policy) is not None
    assert attempt.is_last() and leg.budget == 0.0
    assert leg.deadline == pytest.approx(attempt.prefill_deadline(), abs=0.05)


async def test_engine_rejection_is_final_and_excludes_nothing(core: Core) -> None:
    d = dispatch(core)
    attempt = d.new_attempt()
    leg = attempt.client_leg(await attempt.pick("decode"), 4, 10)
    rejected = EngineRejected("decode", leg.target, 400, b'{"error": "bad"}', b"application/json")
    assert attempt.fail(rejected, core.retry_policy) is None
    assert attempt.phase is Phase.FAILED and attempt.failure is rejected and rejected.status == 400
    assert not d.excluded("decode") and idle(core)
    assert "gave up" not in rejected.message


async def test_a_failure_past_infer_timeout_ends_the_request(core: Core) -> None:
    d = dispatch(core)
    attempt = d.new_attempt()
    leg = attempt.prefill_leg(await attempt.pick("prefill"))
    d.deadline = d.loop.time()  # the budget is spent (60 s in the fixture)
    assert attempt.fail(leg.failed("timeout", "no answer"), core.retry_policy) is None
    assert attempt.failure is not None and attempt.failure.reason == "infer_timeout"
    assert attempt.failure.status == 504 and not attempt.failure.retryable
    assert "last error: no answer" in attempt.failure.message


async def test_the_first_failure_of_an_attempt_is_its_cause(core: Core) -> None:
    """decode_first: the callback's prefill failed, so the decode leg is closed; its own (cancelled) failure
    is a consequence, and the retry avoids the prefill instance, not the decode."""
    d = dispatch(core)
    attempt = d.new_attempt()
    decode = attempt.client_leg(await attempt.pick("decode"), 4, 10)
    prefill = attempt.prefill_leg(await attempt.pick("prefill"))
    cause = prefill.failed("connect", "refused")
    attempt.prefill_failed(cause)
    assert decode.state is LegState.ABORTED
    consequence = decode.failed("cancelled", "closed by the coordinator")
    assert decode.state is LegState.ABORTED and attempt.cause is cause
    attempt.fail(consequence, core.retry_policy)
    assert attempt.failure is cause
    assert d.excluded("prefill") == {prefill.target.instance_id} and not d.excluded("decode")


async def test_streaming_is_the_retry_guard(core: Core) -> None:
    d = dispatch(core)
    attempt = d.new_attempt()
    leg = attempt.client_leg(await attempt.pick("decode"), 4, 10)
    leg._move(LegState.SENT)
    attempt._enter(Phase.DECODE)
    leg._move(LegState.RECEIVING)
    attempt._enter(Phase.STREAMING)
    with pytest.raises(InvalidTransition):
        attempt._enter(Phase.RETRYING)
    assert attempt.fail(leg.failed("closed", "engine died"), core.retry_policy) is None
    assert attempt.phase is Phase.FAILED
    with pytest.raises(InvalidTransition):
        leg._move(LegState.SENT)


async def test_expire_closes_the_attempt_and_cancels_the_task_once(core: Core) -> None:
    d = dispatch(core)
    attempt = d.new_attempt()
    legs = [
        attempt.prefill_leg(await attempt.pick("prefill")),
        attempt.client_leg(await attempt.pick("decode"), 4, 10),
    ]
    task = asyncio.ensure_future(asyncio.sleep(30))
    d.attach(task)
    d.expire("client_gone")
    d.expire("infer_timeout")
    assert d.abort_kind == "client_gone" and attempt.phase is Phase.ABORTED
    assert [leg.state for leg in legs] == [LegState.ABORTED] * 2 and idle(core)
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_the_sweeper_finds_stalled_writes_and_spent_budgets(core: Core) -> None:
    d = dispatch(core)
    assert d.expiry(now=100.0, loop_now=d.loop.time(), write_timeout=15) is None
    d.sending(80.0)
    assert d.send_pending and d.expiry(now=100.0, loop_now=d.loop.time(), write_timeout=15) == "write_timeout"
    d.sent()
    assert d.expiry(now=100.0, loop_now=d.deadline + 1, write_timeout=15) == "infer_timeout"


async def test_transitions_feed_the_existing_metrics(core: Core, prometheus: CollectorRegistry) -> None:
    observer = core.observer
    d = dispatch(core)
    attempt = d.new_attempt()
    attempt.pd = True
    prefill = attempt.prefill_leg(await attempt.pick("prefill"))
    decode = attempt.client_leg(await attempt.pick("decode"), 4, 10)
    observer.leg_changed(prefill, LegState.SENT, LegState.DONE, 0.2)
    observer.phase_changed(attempt, Phase.HANDOVER, Phase.STREAMING, 0.3)
    observer.phase_changed(
        attempt, Phase.PREFILL, Phase.STREAMING, 0.3
    )  # concurrent, output first: no kv_wait
    observer.leg_changed(decode, LegState.RECEIVING, LegState.DONE, 1.5)
    observer.leg_changed(decode, LegState.RECEIVING, LegState.ABORTED, 1.5)  # client gone: not a leg time
    observer.leg_changed(prefill, LegState.SENT, LegState.FAILED, 0.2)
    attempt.pd = False
    observer.leg_changed(decode, LegState.RECEIVING, LegState.FAILED, 0.1)  # stream broke: still timed
    counts = {
        leg: metric(core, prometheus, "motor_coordinator_leg_seconds_count", leg=leg)
        for leg in ("prefill", "kv_wait", "decode", "aggregated")
    }
    assert counts == {"prefill": 1, "kv_wait": 1, "decode": 1, "aggregated": 1}
    assert metric(core, prometheus, "motor_coordinator_leg_seconds_sum", leg="kv_wait") == pytest.approx(0.3)


async def test_the_transitions_an_observer_is_not_told_of_feed_no_metric(
    core: Core, prometheus: CollectorRegistry
) -> None:
    """Unless a request logs its transitions, the observer sees only OBSERVED_*: the others must feed nothing."""

    def samples() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        core.metrics.flush()
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in prometheus.collect()
            for sample in family.samples
        }

    d = dispatch(core)
    attempt = d.new_attempt()
    prefill = attempt.prefill_leg(await attempt.pick("prefill"))
    decode = attempt.client_leg(await attempt.pick("decode"), 4, 10)
    before = samples()
    for pd in (False, True):
        attempt.pd = pd
        for old, allowed in PHASE_TRANSITIONS.items():
            for new in allowed - OBSERVED_PHASES:
                core.observer.phase_changed(attempt, old, new, 0.5)
        for leg, role in ((prefill, "prefill"), (prefill, "encode"), (decode, "decode")):
            leg.role = role
            for old, allowed in LEG_TRANSITIONS.items():
                for new in allowed - OBSERVED_LEG_STATES:
                    core.observer.leg_changed(leg, old, new, 0.5)
    assert samples() == before


async def test_at_debug_every_transition_is_logged_with_its_time(
    core: Core, caplog: pytest.LogCaptureFixture
) -> None:
    quiet = dispatch(core)  # arrived before the level changed: the level is read once, when a request arrives
    with caplog.at_level(logging.DEBUG, logger="motor.coordinator.dispatch.observe"):
        d = dispatch(core)
        attempt = d.new_attempt()
        prefill = attempt.prefill_leg(await attempt.pick("prefill"))
        core.observer.phase_changed(quiet.new_attempt(), Phase.HANDOVER, Phase.STREAMING, 1.5)
        core.observer.leg_changed(prefill, LegState.SENT, LegState.DONE, 0.25)
        core.observer.phase_changed(attempt, Phase.HANDOVER, Phase.STREAMING, 1.5)
    lines = [record.getMessage() for record in caplog.records]
    assert lines == [
        f"request req-1 attempt 0: prefill leg on {prefill.target.instance_id}: SENT → DONE after 0.250 s",
        "request req-1 attempt 0: HANDOVER → STREAMING after 1.500 s",
    ]


async def test_a_leg_closed_before_its_task_resumes_ends_as_cancelled(core: Core) -> None:
    """concurrent: the decode leg's task may first run after the attempt was aborted; it must end quietly."""
    d = dispatch(core)
    attempt = d.new_attempt()
    leg = attempt.client_leg(await attempt.pick("decode"), 4, 10)
    attempt.abort("client disconnected")
    with pytest.raises(LegFailure) as caught:
        await attempt.open_client_leg(leg, b"{}")
    assert caught.value.kind == "cancelled" and leg.state is LegState.ABORTED
    assert attempt.cause is None and attempt.phase is Phase.ABORTED


# ---- admission (pd_aware): a leg waits for room, or is refused as overloaded --------------------------------


@pytest.fixture
async def admitting_core(prometheus: CollectorRegistry) -> AsyncIterator[Core]:
    scheduling = {
        "scheduler_type": "pd_aware",
        "admission_max_decode_requests": 1,
        "admission_queue_timeout": 0.3,
    }
    config = {
        "exception_config": {"max_retry": 2, "retry_delay": 0.25, "infer_timeout": 60},
        "scheduler_config": scheduling,
    }
    async with running_core(prometheus, config) as result:
        yield result


async def test_a_leg_waits_for_room_under_its_admission_bound(admitting_core: Core) -> None:
    first = dispatch(admitting_core).new_attempt()
    busy = first.client_leg(await first.pick("decode"), 4, 10)
    second = dispatch(admitting_core).new_attempt()
    waiting = asyncio.ensure_future(second.pick("decode"))
    await asyncio.sleep(0.05)
    assert not waiting.done(), "the only decode instance is at its bound: the leg waits"
    busy.allocation.release()
    assert await asyncio.wait_for(waiting, 1) is busy.target


async def test_a_leg_is_refused_as_overloaded_when_no_room_frees_in_time(admitting_core: Core) -> None:
    first = dispatch(admitting_core).new_attempt()
    first.client_leg(await first.pick("decode"), 4, 10)
    second = dispatch(admitting_core).new_attempt()
    with pytest.raises(LegFailure) as refused:
        await second.pick("decode")
    assert refused.value.kind == "overloaded" and refused.value.status == 503
    assert not refused.value.retryable and "admission bound" in refused.value.message
