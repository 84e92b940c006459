"""A supervised child: started, watched, restarted with backoff when it exits or stays unhealthy, stopped.

The caller says how to start the child (a function returning a `Child`, so it may also set up pipes or files
each time), optionally how to probe its health, and the `RestartPolicy`. The supervisor exposes its state
and restart count and reports every change of state.

States: `starting` (until a probe says healthy), `healthy` (a probe says so; without a probe, while it
runs), `unhealthy` (a probe says so, or stopped answering after it was healthy), `restarting` (stopping it
and waiting the backoff), `given_up` (it needed more than `max_restarts` restarts within `window_s`),
`stopped`. `exits_before_healthy` counts the starts in a row that ended with the child exiting before it was
healthy (a crash loop), `last_exit_code` the last exit. The backoff grows with every restart and starts over once the child is healthy again; without a
probe that is whenever a poll finds it running, so give one to a child that may crash after a while. With a
probe and `startup_timeout_s`, a child that is not healthy that long after a start is restarted too.
"""

import asyncio
import contextlib
import inspect
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from motor.runtime.backoff import Backoff
from motor.runtime.processes import Child, stop_all

log = logging.getLogger(__name__)

Health = Literal["starting", "healthy", "unhealthy"]
ChildState = Literal["starting", "healthy", "unhealthy", "restarting", "given_up", "stopped"]


@dataclass(frozen=True)
class RestartPolicy:
    backoff: Backoff  # the wait before restart n, n counting restarts since the child was last healthy
    stop_grace_s: float  # SIGTERM → SIGKILL when it is stopped (for a restart, too)
    max_restarts: int | None = None  # this many restarts within `window_s`, then give up (None: never)
    window_s: float = 60.0
    unhealthy_restart_s: float | None = None  # restart a child unhealthy this long (None: never)
    startup_timeout_s: float | None = None  # restart a child not healthy this long after starting (or never)
    poll_s: float = 0.5
    # A healthy child that stops answering turns unhealthy after this many unanswered probes in a row; a busy
    # host can delay one answer past the probe's timeout. A probe that answers "unhealthy" counts at once.
    unanswered_probes_allowed: int = 0


Probe = Callable[[], Awaitable[Health | None]]  # None: no answer


class SupervisedChild:
    def __init__(
        self,
        name: str,
        start: Callable[[], Child | Awaitable[Child]],
        policy: RestartPolicy,
        *,
        probe: Probe | None = None,
        on_change: Callable[[ChildState], None] | None = None,
        on_exit: Callable[[Child], Awaitable[None] | None] | None = None,
    ) -> None:
        """`on_exit` runs (and is awaited, when it returns an awaitable) once the child is gone, before it is
        restarted: clean-up of what it left."""
        self.name = name
        self._start = start
        self.policy = policy
        self._probe = probe
        self._on_change = on_change
        self._on_exit = on_exit
        self.state: ChildState = "starting"
        self.child: Child | None = None
        self.restarts = 0
        self._recent: deque[float] = deque()  # when the restarts within the window happened
        self._failures = 0  # restarts since it was last healthy: the backoff's attempt
        self._was_healthy = False
        self._unanswered = 0  # probes in a row that got no answer
        self._unhealthy_since: float | None = None
        self._launched_at = 0.0
        self._task: asyncio.Task[None] | None = None
        self.exits_before_healthy = 0
        self.last_exit_code: int | None = None

    @property
    def pid(self) -> int | None:
        return self.child.pid if self.child is not None else None

    @property
    def running(self) -> bool:
        return self.child is not None and self.child.running

    async def launch(self) -> None:
        """Start the child now (raising what `start` raises); `run` then only watches it."""
        await self._launch()

    def start(self) -> asyncio.Task[None]:
        """Supervise in a task: launch the child unless `launch` did, then watch it until stopped."""
        self._task = asyncio.create_task(self.run())
        return self._task

    async def run(self) -> None:
        if self.child is None:
            await self._launch()
        while self.state != "given_up":
            await asyncio.sleep(self.policy.poll_s)
            child = self.child
            assert child is not None
            code = child.exit_code()
            if code is not None:
                log.warning("%s (pid %d) exited with code %s", self.name, child.pid, code)
                self.last_exit_code = code
                if not self._was_healthy:
                    self.exits_before_healthy += 1
                await self._restart(f"exited with code {code}")
            else:
                await self._watch_health()

    async def stop(self) -> None:
        """Stop supervising, then stop the child (its whole group, when it leads one)."""
        await self.halt()
        if self.child is not None:
            await asyncio.to_thread(self.child.stop, self.policy.stop_grace_s)
        self._set("stopped")

    async def halt(self) -> None:
        """Stop supervising; the child is left as it is."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _watch_health(self) -> None:
        health = await self._probe() if self._probe is not None else "healthy"
        self._unanswered = self._unanswered + 1 if health is None else 0
        if (
            health is None
            and self.state == "healthy"
            and self._unanswered <= self.policy.unanswered_probes_allowed
        ):
            return
        if health == "healthy":
            self._was_healthy = True
            self.exits_before_healthy = 0
            self._unhealthy_since = None
            self._failures = 0
            self._set("healthy")
        elif health == "starting" or (health is None and not self._was_healthy):
            self._set("starting")
            limit = self.policy.startup_timeout_s
            if limit is not None and time.monotonic() - self._launched_at >= limit:
                await self._restart(f"not healthy within {limit:g} s of its start")
        else:
            now = time.monotonic()
            self._unhealthy_since = self._unhealthy_since or now
            self._set("unhealthy")
            limit = self.policy.unhealthy_restart_s
            if limit is not None and now - self._unhealthy_since >= limit:
                await self._restart(f"unhealthy for {limit:g} s")

    async def _restart(self, why: str) -> None:
        self._set("restarting")
        child = self.child
        assert child is not None
        await asyncio.to_thread(stop_all, [child], self.policy.stop_grace_s)
        if self._on_exit is not None:
            cleaned = self._on_exit(child)
            if inspect.isawaitable(cleaned):
                await cleaned
        if self._budget_spent():
            log.error(
                "%s %s %d times within %g s; not restarting it",
                self.name,
                why,
                self.policy.max_restarts,
                self.policy.window_s,
            )
            self._set("given_up")
            return
        delay = self.policy.backoff.delay(self._failures)
        log.warning("%s %s; restarting in %.1f s", self.name, why, delay)
        await asyncio.sleep(delay)
        self._failures += 1
        self.restarts += 1
        self._recent.append(time.monotonic())
        self._was_healthy = False
        self._unanswered = 0  # probes in a row that got no answer
        self._unhealthy_since = None
        await self._launch()

    def _budget_spent(self) -> bool:
        if self.policy.max_restarts is None:
            return False
        now = time.monotonic()
        while self._recent and now - self._recent[0] > self.policy.window_s:
            self._recent.popleft()
        return len(self._recent) >= self.policy.max_restarts

    async def _launch(self) -> None:
        started = self._start()
        self.child = await started if inspect.isawaitable(started) else started
        self._launched_at = time.monotonic()
        self._set("starting")

    def _set(self, state: ChildState) -> None:
        if state != self.state:
            log.info("%s %s → %s", self.name, self.state, state)
            self.state = state
            if self._on_change is not None:
                self._on_change(state)
