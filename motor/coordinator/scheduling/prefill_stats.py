"""What the coordinator learns about an endpoint from the legs it served (pure: callers pass the clock).

- `PrefillRate`: how fast the endpoint gets through prefill work, from the prefill legs it answered: an
  exponentially weighted mean of seconds per token of work, where a leg's work is every prompt token the
  endpoint had to compute when the leg was placed (its own and those of the prefill legs still running there).
- `StallRecord`: the endpoint's recent prefill stalls, a score that grows by 1 per stall and halves every
  `half_life` seconds; `StallPolicy` says when that makes the endpoint degraded and when it recovered (with
  hysteresis, so it does not flap at the threshold). The scheduler avoids degraded endpoints meanwhile.
"""

import math
from dataclasses import dataclass

RATE_WEIGHT = 0.2
"""Weight of the newest leg in the mean: about the last ten legs count."""


class PrefillRate:
    __slots__ = ("samples", "seconds_per_token")

    def __init__(self) -> None:
        self.samples = 0
        self.seconds_per_token = 0.0

    def observe(self, tokens: float, seconds: float) -> None:
        if tokens <= 0 or seconds < 0:
            return
        sample = seconds / tokens
        if self.samples == 0:
            self.seconds_per_token = sample
        else:
            self.seconds_per_token += RATE_WEIGHT * (sample - self.seconds_per_token)
        self.samples += 1

    @property
    def tokens_per_second(self) -> float | None:
        if self.samples == 0 or self.seconds_per_token <= 0:
            return None
        return 1.0 / self.seconds_per_token


@dataclass(frozen=True, slots=True)
class StallPolicy:
    """An endpoint is degraded at its `degraded_after`-th stall within one `half_life` (its score then reaches
    `(degraded_after + 1) / 2` at least), and recovers once that score has halved (at least one half-life of
    avoidance)."""

    degraded_after: int = 2
    half_life: float = 60.0

    @property
    def degrade_at(self) -> float:
        return (self.degraded_after + 1) / 2

    @property
    def recover_below(self) -> float:
        return self.degrade_at / 2


class StallRecord:
    __slots__ = ("_at", "_score", "degraded", "stalls")

    def __init__(self) -> None:
        self._score = 0.0
        self._at = 0.0
        self.stalls = 0
        self.degraded = False

    def score(self, now: float, policy: StallPolicy) -> float:
        if self._score == 0.0:
            return 0.0
        return self._score * math.exp2(-(now - self._at) / policy.half_life)

    def stalled(self, now: float, policy: StallPolicy) -> bool:
        """Count a stall; True when it made the endpoint degraded."""
        self._score = self.score(now, policy) + 1.0
        self._at = now
        self.stalls += 1
        if self.degraded or self._score < policy.degrade_at:
            return False
        self.degraded = True
        return True

    def recovered(self, now: float, policy: StallPolicy) -> bool:
        """True when a degraded endpoint's score decayed enough: it is no longer degraded from now on."""
        if self.degraded and self.score(now, policy) < policy.recover_below:
            self.degraded = False
            return True
        return False
