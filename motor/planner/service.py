"""The planner's loop: a look at the cluster every `READ_S`, a decision every `interval_s` over the traffic of
the last `window_s` (and the capacities of the last `CAPACITY_HISTORY_S`), a change carried out in the background (the readings go on meanwhile, and decisions hold
until it is done). Every decision is logged with its reason; changes go to the journal."""

import asyncio
import collections
import logging
import time
from collections.abc import Callable

from motor.config.planner import PLANNED_ROLES, PlannedRole
from motor.planner.actuate import Actuator, Counts, ScaleFailed, carry_out
from motor.planner.decide import Decision, Figures, Memory, decide
from motor.planner.figures import window_figures
from motor.planner.journal import Journal, changes, interrupted, recent_changes
from motor.planner.readings import Reading
from motor.planner.scrape import Scraper
from motor.protocol.planner import DecisionView, PlannerStatus
from motor.protocol.specs import PlannerSpec

log = logging.getLogger(__name__)

READ_S = 1.0
HISTORY = 20
# Instances the job runs that are not active yet (a deploy coming up, an engine starting) hold decisions this
# long at most: the planner must not size a job before it serves, nor wait forever on an instance that crashes.
NOT_READY_HOLD_S = 600.0
CAPACITY_HISTORY_S = 120.0  # readings kept for the capacities (the traffic is measured over window_s)

FIGURE_NAMES = (
    "arrival_rate",
    "prompt_tokens",
    "output_tokens",
    "prefill_tokens_per_s",
    "decode_tokens_per_s",
    "decode_batch",
    "prefill_queued_tokens",
    "decode_sequences",
)


class Planner:
    def __init__(
        self,
        spec: PlannerSpec,
        scraper: Scraper,
        actuator: Actuator,
        journal: Journal,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.spec = spec
        self.config = spec.config
        self.scraper = scraper
        self.actuator = actuator
        self.journal = journal
        self.clock = clock
        self.readings: collections.deque[Reading] = collections.deque()
        entries = journal.entries()
        self.memory = Memory(changes=recent_changes(entries, clock()))
        self.interrupted = interrupted(entries)
        if self.interrupted:
            log.warning(
                "a change was being carried out when the planner stopped: %s; deciding afresh",
                self.interrupted,
            )
        self.decisions: collections.deque[DecisionView] = collections.deque(
            changes(entries)[:HISTORY], HISTORY
        )
        self.decisions_by_kind: collections.Counter[str] = collections.Counter()
        self.steps_by_outcome: collections.Counter[str] = collections.Counter()
        self.step_seconds: list[float] = []
        self.last: Decision | None = None
        self.need: dict[PlannedRole, float] | None = (
            None  # the last need worked out (a hold may lack figures)
        )
        self.figures: Figures | None = None
        self.counts: Counts = {role: 0 for role in PLANNED_ROLES}
        self.applying: str | None = None
        self._change: asyncio.Task[None] | None = None
        self._not_ready_since: float | None = None

    async def run(self) -> None:
        next_decision = time.monotonic() + self.config.interval_s
        while True:
            began = time.monotonic()
            self._remember(await self.scraper.read())
            if time.monotonic() >= next_decision:
                next_decision = time.monotonic() + self.config.interval_s
                await self.decide_once()
            await asyncio.sleep(max(0.0, READ_S - (time.monotonic() - began)))

    async def stop(self) -> None:
        if self._change is not None and not self._change.done():
            log.warning("stopping while %s; the job finishes the step it is in", self.applying)
            self._change.cancel()

    def _remember(self, reading: Reading) -> None:
        self.readings.append(reading)
        kept = max(self.config.window_s, CAPACITY_HISTORY_S)
        while self.readings and reading.at - self.readings[0].at > kept:
            self.readings.popleft()

    async def decide_once(self) -> Decision:
        try:
            self.counts = await self.actuator.counts()
        except ScaleFailed as exc:
            log.warning("cannot read the instance counts: %s", exc)
            return self._record(
                Decision("hold", dict(self.counts), f"cannot read the instance counts: {exc}", self.clock())
            )
        busy = f"carrying out {self.applying}" if self.applying else await self.actuator.busy()
        busy = busy or self._not_ready()
        figures = window_figures(
            list(self.readings),
            self.config.itl_slo_ms / 1000.0,
            self.counts,
            self.active(),
            busy,
            window_s=self.config.window_s,
        )
        self.figures = figures
        decision, self.memory = decide(figures, self.config, self.spec.bounds, self.memory, self.clock())
        self._record(decision)
        if decision.kind != "hold":
            self._start(decision)
        return decision

    def _not_ready(self) -> str | None:
        """Why to wait for the job's instances (None: they are all active, or have been waited for long enough)."""
        active = self.active()
        if all(active[role] >= self.counts[role] for role in PLANNED_ROLES):
            self._not_ready_since = None
            return None
        now = time.monotonic()
        if self._not_ready_since is None:
            self._not_ready_since = now
        if now - self._not_ready_since >= NOT_READY_HOLD_S:
            return None
        return (
            f"instances not active yet: {_counts(active)} of {_counts(self.counts)} "
            f"(held {now - self._not_ready_since:.0f} of {NOT_READY_HOLD_S:.0f} s)"
        )

    def active(self) -> Counts:
        counts: Counts = {role: 0 for role in PLANNED_ROLES}
        for view in self.scraper.instances:
            role = view.instance.role
            if role in counts and view.instance.status == "active":
                counts[role] += 1  # type: ignore[index]
        return counts

    def _record(self, decision: Decision) -> Decision:
        self.last = decision
        if decision.need is not None:
            self.need = dict(decision.need)
        self.decisions_by_kind[decision.kind] += 1
        log.info("%s: %s", decision.kind, decision.reason)
        self.decisions.appendleft(
            DecisionView(
                at=decision.at, kind=decision.kind, targets=dict(decision.targets), reason=decision.reason
            )
        )
        return decision

    def _start(self, decision: Decision) -> None:
        current = dict(self.counts)
        self.applying = f"{_counts(current)} → {_counts(decision.targets)}"
        self.journal.write(
            "change",
            kind=decision.kind,
            targets=decision.targets,
            reason=decision.reason,
            **{"from": current},
        )
        self._change = asyncio.create_task(self._carry_out(current, dict(decision.targets)))

    async def _carry_out(self, current: Counts, target: Counts) -> None:
        def progress(step: str) -> None:
            log.info("%s: %s", self.applying, step)

        try:
            took = await carry_out(self.actuator, current, target, self.spec.bounds, progress)
        except ScaleFailed as exc:
            log.error("%s failed: %s", self.applying, exc)
            self.journal.write("failed", targets=target, error=str(exc))
            self.steps_by_outcome["failed"] += 1
        except Exception as exc:  # the planner outlives a failed change: it decides again from what runs
            log.exception("%s failed", self.applying)
            self.journal.write("failed", targets=target, error=f"{type(exc).__name__}: {exc}")
            self.steps_by_outcome["failed"] += 1
        else:
            self.journal.write("done", targets=target, seconds=[round(s, 2) for s in took])
            self.steps_by_outcome["done"] += len(took)
            self.step_seconds.extend(took)
            log.info("%s done in %s s", self.applying, " + ".join(f"{s:.1f}" for s in took))
        finally:
            self.applying = None
            self.interrupted = None

    def status(self) -> PlannerStatus:
        last = self.last
        figures = self.figures
        return PlannerStatus(
            counts=dict(self.counts),
            active=self.active(),
            targets=dict(last.targets) if last else dict(self.counts),
            need=dict(self.need) if self.need is not None else None,
            figures={name: getattr(figures, name) for name in FIGURE_NAMES} if figures else {},
            notes=list(figures.notes) if figures else [],
            applying=self.applying,
            interrupted=self.interrupted,
            decisions=list(self.decisions)[:10],
        )


def _counts(counts: dict[PlannedRole, int]) -> str:
    return f"{counts['prefill']}P+{counts['decode']}D"
