"""How long a prefill leg may take before the coordinator moves it (pure).

A prefill leg that stalls would otherwise hold its request for `request_timeout`. Its own deadline follows from
the work it joins and the instance's measured speed: `allowance + factor × work_tokens × seconds_per_token`,
clamped to `[floor, cap]`, where `work_tokens` is the prefill work the instance had in flight when the leg was
placed (the leg's prompt included) and `seconds_per_token` the instance's `PrefillRate`. An instance with fewer
than `min_samples` measured legs gets the cap. The cap is `prefill_deadline_cap`, never above request_timeout.
"""

from motor.config.models import TimeoutConfig
from motor.coordinator.scheduling.prefill_stats import PrefillRate


def prefill_cap(timeouts: TimeoutConfig) -> float:
    cap = timeouts.prefill_deadline_cap
    return timeouts.request_timeout if cap is None else min(cap, timeouts.request_timeout)


def prefill_budget(timeouts: TimeoutConfig, work_tokens: float, rate: PrefillRate) -> float:
    """Seconds a prefill leg placed with `work_tokens` of work on an instance measured as `rate` may take."""
    cap = prefill_cap(timeouts)
    if rate.samples < timeouts.prefill_deadline_min_samples:
        return cap
    estimate = (
        timeouts.prefill_deadline_allowance
        + timeouts.prefill_deadline_factor * max(work_tokens, 1.0) * rate.seconds_per_token
    )
    return max(min(timeouts.prefill_deadline_floor, cap), min(estimate, cap))
