"""The backoff calculator is pure: every delay and stop is computed, nothing sleeps."""

import math
from dataclasses import dataclass

import pytest

from motor.runtime.backoff import Backoff


def test_delays_grow_by_the_factor_up_to_the_cap() -> None:
    policy = Backoff(initial_s=0.2, factor=2.0, cap_s=2.0)

    assert [policy.delay(n) for n in range(6)] == pytest.approx([0.2, 0.4, 0.8, 1.6, 2.0, 2.0])


def test_without_a_cap_the_delay_keeps_growing_and_huge_attempts_do_not_overflow() -> None:
    policy = Backoff(initial_s=0.5)

    assert policy.delay(3) == 4.0
    assert policy.delay(5000) == math.inf
    assert Backoff(initial_s=1.0, cap_s=30.0).delay(10**6) == 30.0


def test_a_zero_initial_delay_means_retry_at_once() -> None:
    assert {Backoff(initial_s=0.0).delay(n) for n in range(5)} == {0.0}


@pytest.mark.parametrize(("draw", "factor"), [(0.0, 0.75), (0.5, 1.0), (0.999999, 1.25)])
def test_jitter_spreads_the_delay_by_the_fraction_either_way(draw: float, factor: float) -> None:
    policy = Backoff(initial_s=1.0, factor=2.0, cap_s=100.0, jitter=0.25)

    assert policy.delay(2, rng=lambda: draw) == pytest.approx(4.0 * factor, rel=1e-5)


def test_jitter_never_exceeds_the_cap() -> None:
    policy = Backoff(initial_s=1.0, cap_s=2.0, jitter=0.5)

    assert policy.delay(5, rng=lambda: 0.999) == 2.0
    assert policy.delay(5, rng=lambda: 0.0) == 1.0


def test_max_attempts_counts_the_first_attempt() -> None:
    policy = Backoff(initial_s=0.005, cap_s=0.1, max_attempts=3)

    assert policy.next_delay(1) == 0.005
    assert policy.next_delay(2) == 0.01
    assert policy.next_delay(3) is None
    assert [policy.exhausted(n) for n in (1, 2, 3)] == [False, False, True]
    assert not Backoff(initial_s=0.005).exhausted(1000), "no max_attempts: never exhausted"


def test_no_wait_may_end_past_max_elapsed() -> None:
    policy = Backoff(initial_s=1.0, factor=2.0, max_elapsed_s=10.0)

    assert policy.next_delay(3, elapsed_s=6.0) == 4.0  # ends exactly at the limit
    assert policy.next_delay(3, elapsed_s=6.5) is None
    assert Backoff(initial_s=1.0).next_delay(50, elapsed_s=1e9) is not None  # no stop: never gives up


@pytest.mark.parametrize(
    "fields",
    [
        {"initial_s": -1.0},
        {"initial_s": 1.0, "factor": 0.5},
        {"initial_s": 2.0, "cap_s": 1.0},
        {"initial_s": 1.0, "jitter": 1.5},
        {"initial_s": 1.0, "max_attempts": 0},
        {"initial_s": 1.0, "max_elapsed_s": -1.0},
    ],
    ids=str,
)
def test_nonsense_policies_are_refused(fields: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=r"need|fraction"):
        Backoff(**fields)  # type: ignore[arg-type]


def test_attempts_count_from_zero_and_failures_from_one() -> None:
    with pytest.raises(ValueError, match="count from 0"):
        Backoff(initial_s=1.0).delay(-1)
    with pytest.raises(ValueError, match="after an attempt failed"):
        Backoff(initial_s=1.0).next_delay(0)


@dataclass
class FakeRetryState:
    """The two fields of tenacity's RetryCallState that the policy reads."""

    attempt_number: int
    seconds_since_start: float | None


def test_the_policy_is_tenacitys_wait_and_stop() -> None:
    policy = Backoff(initial_s=0.1, factor=3.0, max_attempts=3, max_elapsed_s=5.0)

    assert policy.wait(FakeRetryState(1, 0.0)) == pytest.approx(0.1)  # type: ignore[arg-type]
    assert policy.wait(FakeRetryState(2, 0.1)) == pytest.approx(0.3)  # type: ignore[arg-type]
    assert not policy.stop(FakeRetryState(2, 0.4))  # type: ignore[arg-type]
    assert policy.stop(FakeRetryState(3, 0.4))  # type: ignore[arg-type]
    assert policy.stop(FakeRetryState(1, 4.95))  # type: ignore[arg-type]


async def test_tenacity_retries_with_the_policy_and_returns_the_last_result() -> None:
    from tenacity import AsyncRetrying, retry_if_result

    slept: list[float] = []

    async def record(seconds: float) -> None:
        slept.append(seconds)

    calls = iter([None, None, "found"])
    polling = AsyncRetrying(
        sleep=record,
        wait=Backoff(initial_s=0.01, factor=2.0).wait,
        stop=Backoff(initial_s=0.01, max_attempts=5).stop,
        retry=retry_if_result(lambda value: value is None),
    )

    async def poll() -> str | None:
        return next(calls)

    assert await polling(poll) == "found"
    assert slept == pytest.approx([0.01, 0.02])
