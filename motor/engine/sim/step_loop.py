"""Runs a StepScheduler in real time on the event loop: plan a step, sleep its modelled time, complete it.

Steps follow each other in model time: the next step starts where the last one ended, even when the event
loop woke late (other engines in the process, other load on the machine), so the modelled capacity holds as
long as the process keeps up on average. A loop more than `MAX_LAG_S` behind drops the lag instead of
bursting to catch up.
"""

import asyncio
import logging
from collections.abc import Callable

from motor.engine.sim.errors import SimError
from motor.engine.sim.step_scheduler import ScheduledSequence, Step, StepScheduler

log = logging.getLogger(__name__)

MAX_LAG_S = 0.05


class StepLoop:
    def __init__(
        self,
        scheduler: StepScheduler,
        *,
        slowdown: Callable[[], float],
        on_step: Callable[[Step, float], None] | None = None,
    ) -> None:
        """`on_step(step, seconds)` hears of every completed step and the seconds it really took (a late loop
        makes steps longer than modelled, as clients see them)."""
        self.scheduler = scheduler
        self._slowdown = slowdown
        self._on_step = on_step
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Future[None] | None = None

    def submit(self, seq: ScheduledSequence) -> None:
        """Queue a sequence (ValueError when it can never fit); starts the loop on first use."""
        self.scheduler.submit(seq)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="motor-sim steps")
            self._task.add_done_callback(self._stopped)
        self._poke()

    def abort(self, seq: ScheduledSequence) -> None:
        self.scheduler.abort(seq)
        self._poke()

    async def close(self) -> None:
        """Stop stepping; the requests still held get a 503."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for seq in self.scheduler.abandon_all():
            seq.on_failure(SimError(503, "the engine is shutting down"))

    def _poke(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        while True:
            step = self.scheduler.plan(start, slowdown=self._slowdown())
            if step is None:
                await self._idle(self.scheduler.next_ready_at())
                start = loop.time()
                continue
            began = loop.time()
            end = start + step.seconds
            # sleep(0) still yields: a zero-cost model must not starve the requests it serves.
            await asyncio.sleep(max(end - loop.time(), 0.0))
            self.scheduler.complete(step)
            if self._on_step is not None:
                self._on_step(step, loop.time() - began)
            start = max(end, loop.time() - MAX_LAG_S)

    async def _idle(self, wake_at: float | None) -> None:
        loop = asyncio.get_running_loop()
        self._wake = loop.create_future()
        timer = None if wake_at is None else loop.call_at(wake_at, self._poke)
        try:
            await self._wake
        finally:
            self._wake = None
            if timer is not None:
                timer.cancel()

    def _stopped(self, task: asyncio.Task[None]) -> None:
        """The loop ended: on a bug, fail every sequence it held rather than leave their requests hanging."""
        self._task = None
        if task.cancelled() or task.exception() is None:
            return
        error = task.exception()
        log.error("motor-sim step loop failed", exc_info=error)
        for seq in self.scheduler.abandon_all():
            seq.on_failure(error)
