"""What a store client knows about its master being gone, so that a pool outage costs hit ratio, not time.

While `mooncake_master` is down, every native store call blocks in Mooncake's own reconnect loop (measured:
4–9 s per call) before it fails with RPC_FAIL. A client whose calls run on a few threads (an engine's KV path)
would queue every request behind those calls: the whole engine stalls for as long as the master is gone.

`MasterOutage` is a circuit breaker in front of the native calls. The first call that finds the master gone
opens it; from then on calls are refused at once (the caller treats that as a miss and computes instead),
except that every so often — with backoff — one caller checks whether the master's port accepts connections
again and, if it does, lets its call through as the trial. The trial's success closes the breaker; a failure
that says nothing about the master (an error answer, a stale connection breaking) leaves the next look to
decide. The clock and the port check are parameters, so the logic is tested without a master.
"""

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from motor.runtime.backoff import Backoff

log = logging.getLogger(__name__)

# Between two looks at the master's port during an outage: soon at first (a supervisor restarts a master in
# about a second), then at most every 2 s.
PROBE_BACKOFF = Backoff(initial_s=0.1, factor=2.0, cap_s=2.0, jitter=0.2)


@dataclass(frozen=True)
class OutageView:
    """For metrics: whether the master is taken to be up, outages so far, calls refused during them, and the
    seconds spent in outages (the current one included)."""

    up: bool
    outages: int
    refused_calls: int
    down_seconds: float


class MasterOutage:
    def __init__(
        self,
        master_reachable: Callable[[], bool],
        *,
        probe_backoff: Backoff = PROBE_BACKOFF,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._reachable = master_reachable
        self._backoff = probe_backoff
        self._clock = clock
        self._lock = threading.Lock()
        self._down_since: float | None = None
        self._next_look = 0.0
        self._failed_looks = 0
        self._trial_running = False
        self._outages = 0
        self._refused = 0
        self._down_total = 0.0

    @property
    def down(self) -> bool:
        return self._down_since is not None

    def skip_now(self) -> bool:
        """True while a call would certainly be refused (no look at the master is due): callers that hand calls
        to a thread pool ask this first, so refused calls never wait for a thread."""
        with self._lock:
            return self._down_since is not None and (self._trial_running or self._clock() < self._next_look)

    def admit(self) -> bool:
        """May a call go to the master? Always while it is up; during an outage only the one trial call made
        once the master's port accepts connections again."""
        if self._down_since is None:
            return True
        with self._lock:
            if self._down_since is None:
                return True
            if self._trial_running or self._clock() < self._next_look:
                self._refused += 1
                return False
            self._trial_running = True
        if self._reachable():  # outside the lock: a look may take a connect timeout
            return True
        with self._lock:
            self._trial_running = False
            self._schedule_look()
            self._refused += 1
        return False

    def failed(self) -> None:
        """A call found the master gone (it failed with RPC_FAIL or could not reach it)."""
        with self._lock:
            if self._down_since is None:
                self._down_since = self._clock()
                self._outages += 1
                self._failed_looks = 0
                log.warning(
                    "the KV pool master does not answer: pool calls are skipped (misses, computed instead) "
                    "until it is back"
                )
            self._trial_running = False
            self._schedule_look()

    def inconclusive(self) -> None:
        """A call failed in a way that tells nothing about the master (it answered with an error, or a stale
        connection broke while the port accepts again): during an outage this ends the trial, and the next look
        decides. Without it a trial ending that way would leave every later call refused."""
        with self._lock:
            if self._down_since is None:
                return
            self._trial_running = False
            self._schedule_look()

    def succeeded(self) -> None:
        """A call the master answered: the outage, if there was one, is over."""
        with self._lock:
            if self._down_since is None:
                return
            lasted = self._clock() - self._down_since
            self._down_total += lasted
            self._down_since = None
            self._trial_running = False
        log.warning("the KV pool master answers again after %.1f s; pool calls resume", lasted)

    def view(self) -> OutageView:
        with self._lock:
            current = self._clock() - self._down_since if self._down_since is not None else 0.0
            return OutageView(
                up=self._down_since is None,
                outages=self._outages,
                refused_calls=self._refused,
                down_seconds=self._down_total + current,
            )

    def _schedule_look(self) -> None:
        self._next_look = self._clock() + self._backoff.delay(self._failed_looks)
        self._failed_looks += 1
