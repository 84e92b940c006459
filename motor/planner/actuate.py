"""Carrying a decision out through the scale paths that exist: add first, drain before removing.

`scale_steps` (pure) orders a change: when the new instances fit in the budget beside the ones that go, the
growing roles are scaled first and the shrinking ones after (capacity never dips); under a full budget the
shrinking roles go first, then the growing ones come (a role conversion: drain-remove, then add). Every step
is one scale of the backend, which drains what it removes before it stops it:

- locally, `motor.deploy.local.scale.scale_to`: `--update-instance-num` with the new counts; the job
  supervisor terminates removed instances through the controller (the coordinators stop routing to them, their
  engines finish what they serve) and the call returns once new instances are active and removed ones gone;
- on Kubernetes, `motor.planner.kubernetes`.
"""

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from motor.config.planner import PLANNED_ROLES, PlannedRole, PlannerBounds
from motor.deploy.errors import DeployError
from motor.deploy.local.events import Event, UpdateStep
from motor.deploy.local.scale import deployed_counts, scale_to, update_in_progress

log = logging.getLogger(__name__)

Counts = dict[PlannedRole, int]
STEP_READY_TIMEOUT_S = 300.0


class ScaleFailed(Exception):
    """A scale step the backend could not carry out; the message says why."""


class Actuator(Protocol):
    async def counts(self) -> Counts:
        """Instances per role the job runs now (raises ScaleFailed when it cannot be read)."""

    async def busy(self) -> str | None:
        """A change in progress that the planner did not start (None: none)."""

    async def scale(self, counts: Counts, progress: Callable[[str], None]) -> None:
        """One step: scale to `counts`, draining what goes, until the job is ready again (raises ScaleFailed)."""


def scale_steps(current: Counts, target: Counts, bounds: PlannerBounds) -> list[Counts]:
    """The counts to go through from `current` to `target`, in order (the last is `target`)."""
    grown: Counts = {role: max(current[role], target[role]) for role in PLANNED_ROLES}
    shrunk: Counts = {role: min(current[role], target[role]) for role in PLANNED_ROLES}
    if target == current:
        return []
    first = grown if bounds.within_budget(grown) else shrunk
    return [first, target] if first not in (current, target) else [target]


async def carry_out(
    actuator: Actuator,
    current: Counts,
    target: Counts,
    bounds: PlannerBounds,
    progress: Callable[[str], None],
) -> list[float]:
    """Scale from `current` to `target` step by step; the seconds each step took (raises ScaleFailed)."""
    took = []
    for step in scale_steps(current, target, bounds):
        began = asyncio.get_running_loop().time()
        progress(f"scaling to {step['prefill']}P+{step['decode']}D")
        await actuator.scale(step, progress)
        took.append(asyncio.get_running_loop().time() - began)
        progress(f"at {step['prefill']}P+{step['decode']}D after {took[-1]:.1f} s")
    return took


class LocalActuator:
    """A local job: its job file says what runs, its job supervisor scales it."""

    def __init__(self, job_dir: Path) -> None:
        self.job_dir = job_dir

    async def counts(self) -> Counts:
        try:
            found = await asyncio.to_thread(deployed_counts, self.job_dir)
        except DeployError as exc:
            raise ScaleFailed(exc.message) from exc
        return {role: found.get(role, 0) for role in PLANNED_ROLES}

    async def busy(self) -> str | None:
        return await asyncio.to_thread(update_in_progress, self.job_dir)

    async def scale(self, counts: Counts, progress: Callable[[str], None]) -> None:
        def report(event: Event) -> None:
            if isinstance(event, UpdateStep):
                progress(event.step)

        try:
            await asyncio.to_thread(
                scale_to, self.job_dir, dict(counts), ready_timeout=STEP_READY_TIMEOUT_S, progress=report
            )
        except DeployError as exc:
            details = "; ".join(exc.details)
            raise ScaleFailed(f"{exc.message}{': ' + details if details else ''}") from exc
