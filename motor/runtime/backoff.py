"""Retry policy as a value: a pure delay calculator, apart from whatever loop waits on it.

`Backoff.delay(n)` is the wait after the n-th failed attempt (0 = the first): `initial_s * factor**n`, capped
at `cap_s`, then spread by ±`jitter` (a fraction) so that many clients do not retry in step. `next_delay` adds
the stops: at most `max_attempts` attempts in all, and no wait that would end past `max_elapsed_s` since the
first attempt. Call sites with their own loop (a supervisor restarting a child, a link that keeps pushing) ask
`delay`/`next_delay`; a whole retry loop can hand the policy to tenacity as `wait=policy.wait`,
`stop=policy.stop`.
"""

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tenacity import RetryCallState


@dataclass(frozen=True)
class Backoff:
    initial_s: float
    factor: float = 2.0
    cap_s: float = math.inf
    jitter: float = 0.0
    max_attempts: int | None = None
    max_elapsed_s: float | None = None

    def __post_init__(self) -> None:
        if self.initial_s < 0 or self.factor < 1 or self.cap_s < self.initial_s:
            raise ValueError(f"{self!r}: need 0 <= initial_s <= cap_s and factor >= 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"{self!r}: jitter is a fraction of the delay, from 0 to 1")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError(f"{self!r}: need max_attempts >= 1 (it counts the first attempt)")
        if self.max_elapsed_s is not None and self.max_elapsed_s < 0:
            raise ValueError(f"{self!r}: need max_elapsed_s >= 0")

    def delay(self, attempt: int, rng: Callable[[], float] = random.random) -> float:
        """Seconds to wait after failed attempt `attempt` (0-based) before the next; `rng` draws from [0, 1)."""
        if attempt < 0:
            raise ValueError(f"attempt {attempt}: attempts count from 0")
        # Past the cap the power only overflows: stop multiplying once it is reached.
        base = self.initial_s
        for _ in range(attempt):
            if base >= self.cap_s:
                break
            base *= self.factor
        base = min(base, self.cap_s)
        if self.jitter:
            base *= 1 + self.jitter * (2 * rng() - 1)
        return min(base, self.cap_s)

    def exhausted(self, failures: int) -> bool:
        """After `failures` failed attempts, `max_attempts` allows no other."""
        return self.max_attempts is not None and failures >= self.max_attempts

    def next_delay(
        self, failures: int, elapsed_s: float = 0.0, rng: Callable[[], float] = random.random
    ) -> float | None:
        """After `failures` failed attempts (>= 1) and `elapsed_s` since the first began: the wait before the
        next attempt, or None when the policy gives up."""
        if failures < 1:
            raise ValueError(f"failures {failures}: ask after an attempt failed")
        if self.exhausted(failures):
            return None
        wait = self.delay(failures - 1, rng)
        if self.max_elapsed_s is not None and elapsed_s + wait > self.max_elapsed_s:
            return None
        return wait

    def wait(self, state: "RetryCallState") -> float:
        """tenacity's `wait`: the delay after the attempt that just failed."""
        return self.delay(state.attempt_number - 1)

    def stop(self, state: "RetryCallState") -> bool:
        """tenacity's `stop`: True when `next_delay` gives up."""
        elapsed = state.seconds_since_start or 0.0
        return self.next_delay(state.attempt_number, elapsed) is None
