"""The planner's decision (pure: figures, config and memory in; a decision and the next memory out).

What each role needs, in instances (fractional):

    prefill = max(arrivals/s × prompt tokens computed per request / (tokens/s one instance computes × ρ),
                  prompt tokens queued now / (tokens/s one instance computes × the TTFT budget))
    decode  = max(arrivals/s × output tokens per request / (tokens/s one instance decodes at the ITL
                  objective × max_utilization),
                  sequences decoding or waiting now / (the batch one instance holds at the objective ×
                  max_utilization))

The TTFT budget is the objective less one decode step (the first token comes from the decode instance). ρ is
the busiest a prefill instance may be while a prompt's wait stays within that budget: a prefill instance works
through its queue like one server at a constant rate, whose mean wait at utilisation ρ is S·ρ / (2(1 − ρ)) for a
prompt taking S seconds alone (M/D/1), so S + wait ≤ budget gives ρ ≤ 2(r − 1)/(2r − 1) with r = budget / S;
never above max_utilization. The queue terms react to a burst at once, before the per-request averages move.

The targets: of every split within the bounds and the budget, the fewest instances (accelerators) that meet
both needs; when none does, the split whose worse-covered role is covered best (count / need), then the one
nearest the current counts. Growth is applied at once (bursts; while the shrinking part of a target waits, the
best split that shrinks nothing is applied); a change that shrinks a role must be proposed
`scale_down_intervals` decisions in a row and clear the hysteresis margin: the shrunk role's need stays at most
(1 − margin) of its new count, or, under a budget that cannot meet both needs, the move raises the worse role's
coverage by the margin. Nothing changes during a scale still in progress, within `cooldown_s` of the last
change, or past `max_changes_per_minute`; without the figures a role's need takes, the planner holds and says
which are missing. Idle (nothing arrives, nothing queued): the minimums.
"""

import math
from dataclasses import dataclass, field, replace
from typing import Literal

from motor.config.models import PlannerConfig
from motor.config.planner import PLANNED_ROLES, PlannedRole, PlannerBounds

DecisionKind = Literal["hold", "scale", "convert"]
DECISION_KINDS: tuple[DecisionKind, ...] = ("hold", "scale", "convert")
Counts = dict[PlannedRole, int]
IDLE_RATE = 1e-3  # requests/s below which nothing arrives
MINUTE_S = 60.0


@dataclass(frozen=True)
class Figures:
    """What the planner measured (None: not measured yet). Rates are per second of its window; capacities are
    one instance's, measured on the engines or by the coordinator, never read from the config."""

    counts: Counts  # instances the job runs (deployed), per role
    active: Counts  # of those, routable
    arrival_rate: float | None = None  # client requests/s arriving at the coordinator
    prompt_tokens: float | None = None  # prompt tokens a prefill instance computed per request (not cached)
    output_tokens: float | None = None  # tokens a decode instance generated per request
    prefill_tokens_per_s: float | None = None  # one prefill instance, working through a queue
    decode_tokens_per_s: float | None = None  # one decode instance at the ITL objective
    decode_batch: float | None = None  # sequences one decode instance holds at the ITL objective
    prefill_queued_tokens: float = 0.0  # prompt tokens waiting at the prefill instances now
    decode_sequences: float = 0.0  # sequences decoding or waiting at the decode instances now
    changing: str | None = None  # a scale in progress (what it waits for), else None
    notes: tuple[str, ...] = ()  # how the capacities were measured, for the reason


@dataclass(frozen=True)
class Memory:
    """What the planner remembers between decisions: its changes (times) and the shrinking proposal it has
    seen in a row."""

    changes: tuple[float, ...] = ()
    proposal: tuple[int, int] | None = None
    streak: int = 0

    @property
    def last_change(self) -> float | None:
        return self.changes[-1] if self.changes else None


@dataclass(frozen=True)
class Decision:
    kind: DecisionKind
    targets: Counts
    reason: str
    at: float
    need: dict[PlannedRole, float] | None = field(default=None)


def decide(
    figures: Figures, config: PlannerConfig, bounds: PlannerBounds, memory: Memory, now: float
) -> tuple[Decision, Memory]:
    """The decision at `now` (seconds on the planner's clock) and the memory after it."""
    current = dict(figures.counts)

    def hold(
        reason: str, need: dict[PlannedRole, float] | None = None, keep: Memory = memory
    ) -> tuple[Decision, Memory]:
        return Decision("hold", current, reason, now, need), keep

    if figures.changing is not None:
        return hold(f"waiting: {figures.changing}")
    need, explained = role_needs(figures, config, bounds)
    if need is None:
        return hold(explained)
    target = best_split(need, current, bounds, config.enable_role_conversion)
    summary = f"{explained} → {_counts(target)} (now {_counts(current)})"
    if target == current:
        verdict = "meets it" if _coverage(current, need) >= 1.0 else "is the most the bounds and budget allow"
        if verdict != "meets it" and not config.enable_role_conversion:
            verdict += " without role conversion"
        return hold(
            f"{explained}: {_counts(current)} {verdict}", need, replace(memory, proposal=None, streak=0)
        )
    shrinking = [role for role in PLANNED_ROLES if target[role] < current[role]]
    growing = [role for role in PLANNED_ROLES if target[role] > current[role]]
    proposal = (target["prefill"], target["decode"])
    streak = memory.streak + 1 if memory.proposal == proposal else 1
    seen = replace(memory, proposal=proposal, streak=streak)
    if shrinking:
        waits = None
        if not _clears_margin(need, current, target, shrinking, config.hysteresis_margin):
            waits, seen = "within the hysteresis margin", replace(seen, streak=0)
        elif streak < config.scale_down_intervals:
            waits = f"proposed {streak} of {config.scale_down_intervals} times in a row"
        if waits is not None:
            # what grows does not wait for what shrinks: the best split that shrinks nothing, if it grows
            grown = best_split(need, current, bounds, config.enable_role_conversion, floor=current)
            if grown == current:
                return hold(f"{summary}: {waits}", need, seen)
            target, shrinking = grown, []
            summary = f"{explained} → {_counts(target)} (now {_counts(current)}; shrinking waits: {waits})"
    last = memory.last_change
    if last is not None and now - last < config.cooldown_s:
        return hold(f"{summary}: cooldown, {config.cooldown_s - (now - last):.0f} s left", need, seen)
    recent = tuple(t for t in memory.changes if now - t < MINUTE_S)
    if len(recent) >= config.max_changes_per_minute:
        return hold(
            f"{summary}: {len(recent)} changes in the last minute (max_changes_per_minute)", need, seen
        )
    kind: DecisionKind = "convert" if shrinking and growing else "scale"
    return Decision(kind, target, summary, now, need), Memory(changes=(*recent, now))


def role_needs(
    figures: Figures, config: PlannerConfig, bounds: PlannerBounds
) -> tuple[dict[PlannedRole, float] | None, str]:
    """(instances each role needs, how that was worked out), or (None, which figures are missing)."""
    rate = figures.arrival_rate
    if rate is None:
        return None, "no arrival rate measured yet"
    queued = figures.prefill_queued_tokens > 0 or figures.decode_sequences > 0
    if rate < IDLE_RATE and not queued:
        return dict.fromkeys(PLANNED_ROLES, 0.0), "idle (nothing arrives, nothing queued): the minimums"
    measured = (
        ("prompt tokens per request", figures.prompt_tokens, 0.0),
        ("prefill capacity", figures.prefill_tokens_per_s, 1e-9),
        ("output tokens per request", figures.output_tokens, 0.0),
        ("decode capacity", figures.decode_tokens_per_s, 1e-9),
    )
    missing = [name for name, value, least in measured if value is None or value < least]
    if missing:
        return None, f"missing figures: {', '.join(missing)} (arrivals {rate:.2f}/s)"
    assert figures.prompt_tokens is not None and figures.output_tokens is not None
    assert figures.prefill_tokens_per_s is not None and figures.decode_tokens_per_s is not None
    prefill, prefill_why = _prefill_need(rate, figures, config)
    decode, decode_why = _decode_need(rate, figures, config)
    notes = f" [{'; '.join(figures.notes)}]" if figures.notes else ""
    return {"prefill": prefill, "decode": decode}, f"prefill {prefill_why}; decode {decode_why}{notes}"


def _prefill_need(rate: float, figures: Figures, config: PlannerConfig) -> tuple[float, str]:
    capacity = figures.prefill_tokens_per_s or 0.0
    tokens = figures.prompt_tokens or 0.0
    budget_s = max((config.ttft_slo_ms - config.itl_slo_ms) / 1000.0, 1e-3)
    alone_s = tokens / capacity
    ratio = budget_s / alone_s if alone_s > 0 else math.inf
    busy = (
        config.max_utilization
        if ratio <= 1
        else min(config.max_utilization, 2 * (ratio - 1) / (2 * ratio - 1))
    )
    steady = rate * tokens / (capacity * busy)
    backlog = figures.prefill_queued_tokens / (capacity * budget_s)
    why = (
        f"needs {max(steady, backlog):.2f} ({rate:.2f}/s × {tokens:,.0f} prompt tokens at "
        f"{capacity:,.0f} tokens/s per instance, ≤ {busy:.0%} busy"
    )
    if ratio <= 1:
        why += ", a prompt alone takes longer than the TTFT objective"
    if backlog > steady:
        why += f"; {figures.prefill_queued_tokens:,.0f} queued tokens"
    return max(steady, backlog), why + ")"


def _decode_need(rate: float, figures: Figures, config: PlannerConfig) -> tuple[float, str]:
    capacity = figures.decode_tokens_per_s or 0.0
    tokens = figures.output_tokens or 0.0
    busy = config.max_utilization
    steady = rate * tokens / (capacity * busy)
    batch = figures.decode_batch
    backlog = figures.decode_sequences / (batch * busy) if batch else 0.0
    why = (
        f"needs {max(steady, backlog):.2f} ({rate:.2f}/s × {tokens:,.0f} output tokens at "
        f"{capacity:,.0f} tokens/s per instance within ITL {config.itl_slo_ms:,.0f} ms, ≤ {busy:.0%} busy"
    )
    if backlog > steady:
        why += f"; {figures.decode_sequences:,.0f} sequences in decode, {batch:,.1f} per instance"
    return max(steady, backlog), why + ")"


def best_split(
    need: dict[PlannedRole, float],
    current: Counts,
    bounds: PlannerBounds,
    conversion: bool,
    floor: Counts | None = None,
) -> Counts:
    """The counts to run: see the module's docstring. Without `conversion`, no split takes from one role what it
    gives the other; with a `floor`, no role goes below it."""
    candidates: list[Counts] = []
    for prefill in range(bounds.minimum["prefill"], bounds.maximum["prefill"] + 1):
        for decode in range(bounds.minimum["decode"], bounds.maximum["decode"] + 1):
            split: Counts = {"prefill": prefill, "decode": decode}
            if not bounds.within_budget(split):
                continue
            if floor is not None and any(split[role] < floor[role] for role in PLANNED_ROLES):
                continue
            if not conversion and _converts(current, split):
                continue
            candidates.append(split)
    if not candidates:
        return dict(current)

    def distance(split: Counts) -> int:
        return sum(abs(split[role] - current[role]) for role in PLANNED_ROLES)

    def size(split: Counts) -> int:
        return bounds.cost(split) if bounds.max_instances is None else sum(split.values())

    enough = [split for split in candidates if _coverage(split, need) >= 1.0]
    if enough:
        return min(enough, key=lambda split: (size(split), distance(split)))
    return max(
        candidates, key=lambda split: (round(_coverage(split, need), 9), -distance(split), -size(split))
    )


def _coverage(split: Counts, need: dict[PlannedRole, float]) -> float:
    """How well the worse-covered role is covered: its count / its need (inf when nothing is needed)."""
    return min(split[role] / need[role] if need[role] > 0 else math.inf for role in PLANNED_ROLES)


def _converts(current: Counts, split: Counts) -> bool:
    grows = any(split[role] > current[role] for role in PLANNED_ROLES)
    return grows and any(split[role] < current[role] for role in PLANNED_ROLES)


def _clears_margin(
    need: dict[PlannedRole, float],
    current: Counts,
    target: Counts,
    shrinking: list[PlannedRole],
    margin: float,
) -> bool:
    if all(need[role] <= target[role] * (1 - margin) for role in shrinking):
        return True
    before = _coverage(current, need)
    return before < 1.0 and _coverage(target, need) >= before * (1 + margin)


def _counts(counts: Counts) -> str:
    return f"{counts['prefill']}P+{counts['decode']}D"
