"""Per-leg prefill deadlines: the rate estimator, the clamp, the stall record and its policy, the scheduler
avoiding degraded instances (every policy, and only while another instance is left), and the attempt turning a
missed leg deadline into a `prefill_stalled` failure that moves the leg.

tests/integration/test_coordinator_prefill_deadline.py runs the same with sim engines and a stalled prefill."""

from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from motor.config.models import TimeoutConfig
from motor.coordinator.core import Core
from motor.coordinator.dispatch.deadlines import prefill_budget, prefill_cap
from motor.coordinator.dispatch.failures import FAILURES, LegFailure
from motor.coordinator.dispatch.states import LegState, Phase
from motor.coordinator.http.upstream import UpstreamError
from motor.coordinator.scheduling.load import EndpointLoad
from motor.coordinator.scheduling.prefill_stats import RATE_WEIGHT, PrefillRate, StallPolicy, StallRecord
from motor.coordinator.scheduling.scheduler import Scheduler
from tests.unit.test_coordinator_attempt import dispatch, running_core
from tests.unit.test_coordinator_scheduling import POLICIES, demand, make_target


def measured(seconds_per_token: float, samples: int) -> PrefillRate:
    rate = PrefillRate()
    for _ in range(samples):
        rate.observe(1000, 1000 * seconds_per_token)
    return rate


# ---- the estimator -------------------------------------------------------------------------------------------


def test_the_rate_is_an_exponentially_weighted_mean_of_seconds_per_token() -> None:
    rate = PrefillRate()
    assert rate.tokens_per_second is None
    rate.observe(1000, 0.5)
    assert rate.seconds_per_token == pytest.approx(0.0005) and rate.tokens_per_second == pytest.approx(2000)
    rate.observe(1000, 1.5)  # one slow leg moves the mean by RATE_WEIGHT of the difference
    assert rate.seconds_per_token == pytest.approx(0.0005 + RATE_WEIGHT * 0.001)
    rate.observe(0, 3.0)  # nothing computed (a fully cached prompt): not a sample
    assert rate.samples == 2
    for _ in range(60):
        rate.observe(100, 0.01)
    assert rate.seconds_per_token == pytest.approx(0.0001, rel=1e-3), "old legs fade out"


# ---- the clamp -----------------------------------------------------------------------------------------------


def timeouts(**fields: object) -> TimeoutConfig:
    return TimeoutConfig.model_validate(fields)


def test_the_cap_is_request_timeout_unless_set_lower() -> None:
    assert prefill_cap(timeouts()) == 30.0
    assert prefill_cap(timeouts(prefill_deadline_cap=10.0)) == 10.0
    assert prefill_cap(timeouts(request_timeout=5.0, prefill_deadline_cap=10.0)) == 5.0


def test_before_enough_samples_the_leg_gets_the_cap() -> None:
    config = timeouts(prefill_deadline_min_samples=3, prefill_deadline_cap=12.0)
    assert prefill_budget(config, 500, PrefillRate()) == 12.0
    assert prefill_budget(config, 500, measured(0.001, 2)) == 12.0
    assert prefill_budget(config, 500, measured(0.001, 3)) < 12.0


def test_the_budget_scales_with_the_work_and_is_clamped() -> None:
    config = timeouts(
        prefill_deadline_floor=2.0,
        prefill_deadline_factor=4.0,
        prefill_deadline_allowance=1.0,
        prefill_deadline_min_samples=1,
    )
    rate = measured(0.001, 5)  # 1,000 tokens/s
    assert prefill_budget(config, 1500, rate) == pytest.approx(1.0 + 4 * 1.5)
    assert prefill_budget(config, 3000, rate) == pytest.approx(1.0 + 4 * 3.0), "queued work counts"
    assert prefill_budget(config, 50, rate) == 2.0, "the floor"
    assert prefill_budget(config, 100_000, rate) == 30.0, "the cap (request_timeout)"
    assert prefill_budget(config, 0, rate) == 2.0


def test_a_floor_above_the_cap_is_refused_with_the_fix() -> None:
    with pytest.raises(ValidationError, match=r"prefill_deadline_floor .* lower the floor or raise the cap"):
        timeouts(prefill_deadline_floor=5.0, prefill_deadline_cap=3.0)
    with pytest.raises(ValidationError, match="prefill_deadline_factor"):
        timeouts(prefill_deadline_factor=0.5)


# ---- stalls --------------------------------------------------------------------------------------------------


def test_two_stalls_within_a_half_life_degrade_and_decay_recovers() -> None:
    policy = StallPolicy(degraded_after=2, half_life=60.0)
    record = StallRecord()
    assert not record.stalled(0.0, policy) and not record.degraded
    assert record.stalled(30.0, policy) and record.degraded  # 1 × 2^-0.5 + 1 ≥ 1.5
    assert not record.stalled(31.0, policy), "already degraded: not degraded again"
    assert not record.recovered(60.0, policy)
    # the score (about 2.7 at 31 s) must fall below 0.75: about 1.85 half-lives later
    assert not record.recovered(31.0 + 1.8 * 60, policy) and record.degraded
    assert record.recovered(31.0 + 1.9 * 60, policy) and not record.degraded
    assert record.stalls == 3


def test_stalls_far_apart_never_degrade() -> None:
    policy = StallPolicy(degraded_after=2, half_life=60.0)
    record = StallRecord()
    for minute in range(10):
        assert not record.stalled(minute * 120.0, policy)  # 0.25 left of the previous one each time
    assert not record.degraded and record.stalls == 10


def test_degraded_after_one_stall_lasts_a_half_life() -> None:
    policy = StallPolicy(degraded_after=1, half_life=10.0)
    record = StallRecord()
    assert record.stalled(0.0, policy)
    assert not record.recovered(9.9, policy)
    assert record.recovered(10.1, policy)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("policy", POLICIES)
def test_the_scheduler_avoids_a_degraded_instance_while_another_is_left(policy: str) -> None:
    clock = Clock()
    scheduler = Scheduler(policy, stall_policy=StallPolicy(1, 30.0), clock=clock)  # type: ignore[arg-type]
    changes: list[tuple[str, bool]] = []
    scheduler.health_changed = lambda endpoint, degraded: changes.append((endpoint.instance_id, degraded))
    targets = [make_target(i) for i in range(3)]
    scheduler.set_targets(targets)
    endpoint = scheduler._loads[targets[0]]
    assert scheduler.prefill_stalled(endpoint)
    assert changes == [("i0", True)]
    picks = {scheduler.pick("prefill", demand(f"p{i}")) for i in range(12)}
    assert targets[0] not in picks and picks == {targets[1], targets[2]}
    # it still serves when nothing else can: the others failed this request already
    assert scheduler.pick("prefill", demand(), frozenset({"i1", "i2"})) is targets[0]
    view = scheduler.endpoint_load()[targets[0].key]
    assert view["degraded"] is True and view["prefill_stalls"] == 1 and view["stall_score"] == 1.0
    clock.now += 31.0  # one half-life and a bit: recovered
    assert targets[0] in {scheduler.pick("prefill", demand(f"q{i}")) for i in range(12)}
    assert changes == [("i0", True), ("i0", False)]
    assert scheduler.endpoint_load()[targets[0].key]["degraded"] is False


def test_a_degraded_instance_that_leaves_is_forgotten() -> None:
    scheduler = Scheduler("load_balance", stall_policy=StallPolicy(1, 30.0))
    targets = [make_target(i) for i in range(2)]
    scheduler.set_targets(targets)
    scheduler.prefill_stalled(scheduler._loads[targets[0]])
    scheduler.set_targets(targets[1:])
    assert not scheduler._degraded
    assert scheduler.pick("prefill", demand()) is targets[1]


def test_the_measured_rate_is_per_endpoint() -> None:
    scheduler = Scheduler("load_balance")
    targets = [make_target(i) for i in range(2)]
    scheduler.set_targets(targets)
    scheduler.prefill_answered(scheduler._loads[targets[0]], 2000, 0.5)
    view = scheduler.endpoint_load()
    assert view[targets[0].key]["prefill_tokens_per_second"] == pytest.approx(4000)
    assert view[targets[0].key]["prefill_legs_measured"] == 1
    assert view[targets[1].key]["prefill_tokens_per_second"] is None


# ---- the attempt: a missed leg deadline is a stall -----------------------------------------------------------


@pytest.fixture
def prometheus() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
async def core(prometheus: CollectorRegistry) -> AsyncIterator[Core]:
    config = {
        "exception_config": {"max_retry": 2, "retry_delay": 0.25, "infer_timeout": 60},
        "timeout_config": {"request_timeout": 30, "prefill_deadline_min_samples": 2},
        "scheduler_config": {"stall_degraded_after": 2},
    }
    async with running_core(prometheus, config) as result:
        yield result


def endpoint_of(core: Core, instance_id: str) -> EndpointLoad:
    return next(e for e in core.scheduler._loads.values() if e.instance_id == instance_id)


async def test_without_a_measured_rate_the_leg_keeps_the_request_limit(core: Core) -> None:
    attempt = dispatch(core).new_attempt()
    leg = attempt.prefill_leg(await attempt.pick("prefill"))
    assert leg.budget == 0.0 and leg.deadline == pytest.approx(attempt.prefill_deadline(), abs=0.1)
    assert leg.work == attempt.dispatch.request.demand.prompt_tokens
    failure = leg.upstream_failed(UpstreamError("timeout", "the engine did not answer in time"))
    assert failure.kind == "timeout"


async def test_a_missed_leg_deadline_is_a_stall_that_moves_the_leg(
    core: Core, prometheus: CollectorRegistry
) -> None:
    for instance in ("prefill-0", "prefill-1"):
        for _ in range(2):
            core.scheduler.prefill_answered(endpoint_of(core, instance), 1000, 0.1)  # 10,000 tokens/s
    d = dispatch(core)
    attempt = d.new_attempt()
    leg = attempt.prefill_leg(await attempt.pick("prefill"))
    stalled_instance = leg.target.instance_id
    # floor 2 s: a few prompt tokens at 10,000 tokens/s estimate far less
    assert leg.budget == 2.0 and leg.deadline == pytest.approx(core.loop.time() + 2.0, abs=0.1)
    leg.deadline = core.loop.time()  # the deadline passed
    failure = leg.upstream_failed(UpstreamError("timeout", "the engine did not answer in time"))
    assert failure.kind == "prefill_stalled" and "within the leg's deadline (2 s" in failure.message
    assert "10,000 tokens/s measured over 2 legs" in failure.message
    assert FAILURES["prefill_stalled"].retryable and FAILURES["prefill_stalled"].exclude_instance
    assert attempt.fail(failure, core.retry_policy) == 0.25 and attempt.phase is Phase.RETRYING
    assert leg.state is LegState.FAILED and leg.allocation.endpoint.in_flight == 0
    assert d.excluded("prefill") == {stalled_instance}
    assert (await d.new_attempt().pick("prefill")).instance_id != stalled_instance
    core.metrics.flush()
    labels = {"instance": stalled_instance}
    assert prometheus.get_sample_value("motor_coordinator_prefill_stalls_total", labels) == 1
    retries = {"role": "prefill", "reason": "prefill_stalled"}
    assert prometheus.get_sample_value("motor_coordinator_retries_total", retries) == 1
    assert not endpoint_of(core, stalled_instance).stalls.degraded, "one stall does not degrade"


async def test_a_second_stall_degrades_the_instance(core: Core, prometheus: CollectorRegistry) -> None:
    endpoint = endpoint_of(core, "prefill-0")
    for _ in range(2):
        core.scheduler.prefill_answered(endpoint, 1000, 0.1)
    for _ in range(2):
        attempt = dispatch(core).new_attempt()
        leg = attempt.prefill_leg(endpoint.target)
        leg.deadline = core.loop.time()
        failure = leg.upstream_failed(UpstreamError("timeout", "no answer"))
        assert isinstance(failure, LegFailure) and failure.kind == "prefill_stalled"
        attempt.fail(failure, core.retry_policy)
    assert endpoint.stalls.degraded
    labels = {"instance": "prefill-0", "role": "prefill"}
    assert prometheus.get_sample_value("motor_coordinator_instance_degraded", labels) == 1
    assert {(await dispatch(core).new_attempt().pick("prefill")).instance_id for _ in range(6)} == {
        "prefill-1"
    }
