"""The planner's decision (pure: figures, config and memory in; a decision and the next memory out).

What each role needs, in instances (fractional), for the arrivals (its traffic need):

    prefill = arrivals/s × prompt tokens computed per request / (tokens/s one instance computes × ρ)
    decode  = arrivals/s × output tokens per request / (tokens/s one instance decodes at the ITL objective ×
              max_utilization)

and with what waits now (its need now, never below the traffic need):

    prefill: prompt tokens queued now / (tokens/s one instance computes × the TTFT budget)
    decode:  sequences decoding or waiting now / (the batch one instance holds at the objective × max_utilization)

The TTFT budget is the objective less one decode step (the first token comes from the decode instance). ρ is
the busiest a prefill instance may be while a prompt's wait stays within that budget: a prefill instance works
through its queue like one server at a constant rate, whose mean wait at utilisation ρ is S·ρ / (2(1 − ρ)) for a
prompt taking S seconds alone (M/D/1), so S + wait ≤ budget gives ρ ≤ 2(r − 1)/(2r − 1) with r = budget / S;
never above max_utilization.

The split follows the traffic needs: of every split within the bounds and the budget, the fewest instances
(accelerators) that meet both; when none does, the split whose worse-covered role is covered best (count /
need), then the one nearest the current counts. With `fill_budget` only the splits that fill the budget count
(no role could grow by one within its bounds), the one whose worse-covered role is covered best: the budget is
kept and split by need; a split that covers both needs by the hysteresis margin is kept, and a move must raise
the worse role's coverage by the margin. The needs now react to a burst at once, before the per-request averages
move, but only by growing a role into free budget: a queue never takes instances from the other role (a
conversion takes seconds, by which time the queue is gone, and a new instance only serves new arrivals). Growth
is applied at once (while the shrinking part of a target waits, the best split that shrinks nothing is
applied); a change that shrinks a role must be proposed `scale_down_intervals` decisions in a row (proposals
that move the roles the same way and lie within one instance per role of the one before agree, and the latest
is made: a shift still being read, whose target jumps further, waits one decision more) and clear the hysteresis
margin: the shrunk role's need now stays at most (1 − margin) of its new count, or, when the current counts do
not cover the traffic, the move raises the worse role's coverage by the margin. Nothing changes during a scale
still in progress, within `cooldown_s` of the last change, or past `max_changes_per_minute`; without the
figures a role's need takes, the planner holds and says which are missing. Idle (nothing arrives, nothing
queued): the minimums (filling the budget: the counts it runs).
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
    """What the planner remembers between decisions: its changes (times), the latest shrinking proposal and how
    many decisions in a row proposed a move the same way."""

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
    needs, explained = role_needs(figures, config, bounds)
    if needs is None:
        return hold(explained)
    need, traffic = needs.now, needs.traffic
    fill, conversion = config.fill_budget, config.enable_role_conversion
    # the split the arrivals want; what waits now only grows a role into free budget (and holds a shrink back)
    target = best_split(traffic, current, bounds, conversion, fill=fill)
    grown = best_split(need, current, bounds, conversion, floor=current, fill=fill)
    covered = _coverage(current, traffic)
    if fill and target != current and _full(current, bounds) and covered >= 1 + config.hysteresis_margin:
        target, kept = current, f"covers both needs by the margin ({_times(covered)})"
    else:
        kept = "meets it" if covered >= 1.0 else "is the most the bounds and budget allow"
        if kept != "meets it" and not conversion:
            kept += " without role conversion"
    shrinking = [role for role in PLANNED_ROLES if target[role] < current[role]]
    if not shrinking and grown == current:
        return hold(f"{explained}: {_counts(current)} {kept}", need, replace(memory, proposal=None, streak=0))
    summary = f"{explained} → {_counts(target)} (now {_counts(current)})"
    seen = replace(memory, proposal=None, streak=0)
    if shrinking:
        proposal = (target["prefill"], target["decode"])
        agrees = memory.proposal is not None and _agree(memory.proposal, proposal, current)
        streak = memory.streak + 1 if agrees else 1
        seen = replace(memory, proposal=proposal, streak=streak)
        waits = None
        if not _clears_margin(needs, current, target, shrinking, config.hysteresis_margin, fill):
            waits, seen = "within the hysteresis margin", replace(seen, streak=0)
        elif streak < config.scale_down_intervals:
            waits = f"proposed {streak} of {config.scale_down_intervals} times in a row"
        if waits is not None:
            # what grows does not wait for what shrinks: the best split that shrinks nothing, if it grows
            if grown == current:
                return hold(f"{summary}: {waits}", need, seen)
            target, shrinking = grown, []
            summary = f"{explained} → {_counts(target)} (now {_counts(current)}; shrinking waits: {waits})"
    else:
        target, summary = grown, f"{explained} → {_counts(grown)} (now {_counts(current)})"
    growing = [role for role in PLANNED_ROLES if target[role] > current[role]]
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


@dataclass(frozen=True)
class Needs:
    """Instances each role needs (fractional): `traffic` for the arrivals alone, `now` with what waits now too
    (a queue at least as long as the arrivals' need, never less)."""

    now: dict[PlannedRole, float]
    traffic: dict[PlannedRole, float]


def role_needs(figures: Figures, config: PlannerConfig, bounds: PlannerBounds) -> tuple[Needs | None, str]:
    """(what each role needs, how that was worked out), or (None, which figures are missing)."""
    rate = figures.arrival_rate
    if rate is None:
        return None, "no arrival rate measured yet"
    queued = figures.prefill_queued_tokens > 0 or figures.decode_sequences > 0
    if rate < IDLE_RATE and not queued:
        idle = "idle (nothing arrives, nothing queued)" + ("" if config.fill_budget else ": the minimums")
        nothing = dict.fromkeys(PLANNED_ROLES, 0.0)
        return Needs(nothing, dict(nothing)), idle
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
    prefill, prefill_queue, prefill_why = _prefill_need(rate, figures, config)
    decode, decode_queue, decode_why = _decode_need(rate, figures, config)
    notes = f" [{'; '.join(figures.notes)}]" if figures.notes else ""
    needs = Needs(
        now={"prefill": max(prefill, prefill_queue), "decode": max(decode, decode_queue)},
        traffic={"prefill": prefill, "decode": decode},
    )
    return needs, f"prefill {prefill_why}; decode {decode_why}{notes}"


def _prefill_need(rate: float, figures: Figures, config: PlannerConfig) -> tuple[float, float, str]:
    """(the arrivals' need, what the queue alone needs, why)."""
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
        f"needs {steady:.2f} ({rate:.2f}/s × {tokens:,.0f} prompt tokens at {capacity:,.0f} tokens/s per "
        f"instance, ≤ {busy:.0%} busy"
    )
    if ratio <= 1:
        why += ", a prompt alone takes longer than the TTFT objective"
    why += ")"
    if backlog > steady:
        why += f", {backlog:.2f} with {figures.prefill_queued_tokens:,.0f} queued tokens"
    return steady, backlog, why


def _decode_need(rate: float, figures: Figures, config: PlannerConfig) -> tuple[float, float, str]:
    """(the arrivals' need, what the sequences in decode alone need, why)."""
    capacity = figures.decode_tokens_per_s or 0.0
    tokens = figures.output_tokens or 0.0
    busy = config.max_utilization
    steady = rate * tokens / (capacity * busy)
    batch = figures.decode_batch
    backlog = figures.decode_sequences / (batch * busy) if batch else 0.0
    why = (
        f"needs {steady:.2f} ({rate:.2f}/s × {tokens:,.0f} output tokens at {capacity:,.0f} tokens/s per "
        f"instance within ITL {config.itl_slo_ms:,.0f} ms, ≤ {busy:.0%} busy)"
    )
    if backlog > steady:
        why += (
            f", {backlog:.2f} with {figures.decode_sequences:,.0f} sequences in decode ({batch:,.1f} per "
            "instance)"
        )
    return steady, backlog, why


def best_split(
    need: dict[PlannedRole, float],
    current: Counts,
    bounds: PlannerBounds,
    conversion: bool,
    floor: Counts | None = None,
    fill: bool = False,
) -> Counts:
    """The counts to run: see the module's docstring. Without `conversion`, no split takes from one role what it
    gives the other; with a `floor`, no role goes below it; with `fill`, the splits that fill the budget."""
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

    if fill:
        candidates = [split for split in candidates if _full(split, bounds)] or candidates
    enough = [split for split in candidates if _coverage(split, need) >= 1.0]
    if enough and not fill:
        return min(enough, key=lambda split: (size(split), distance(split)))
    return max(
        candidates, key=lambda split: (round(_coverage(split, need), 9), -distance(split), -size(split))
    )


def _coverage(split: Counts, need: dict[PlannedRole, float]) -> float:
    """How well the worse-covered role is covered: its count / its need (inf when nothing is needed)."""
    return min(split[role] / need[role] if need[role] > 0 else math.inf for role in PLANNED_ROLES)


def _full(split: Counts, bounds: PlannerBounds) -> bool:
    """No role could grow by one instance within its maximum and the budget."""
    return all(
        split[role] >= bounds.maximum[role] or not bounds.within_budget({**split, role: split[role] + 1})
        for role in PLANNED_ROLES
    )


def _agree(before: tuple[int, int], proposal: tuple[int, int], current: Counts) -> bool:
    """Proposals agree when they move the roles alike and lie within one instance per role: a need that
    wavers by an instance does not start the count again, while a target that jumps (the latest arrivals half
    of the old phase, half of the new) is not made before it settles."""
    near = all(abs(a - b) <= 1 for a, b in zip(before, proposal, strict=True))
    return near and _moves(before, current) == _moves(proposal, current)


def _moves(proposal: tuple[int, int], current: Counts) -> tuple[int, int]:
    """Which way a proposal moves each role: -1, 0, +1."""
    prefill, decode = proposal
    return (
        (prefill > current["prefill"]) - (prefill < current["prefill"]),
        (decode > current["decode"]) - (decode < current["decode"]),
    )


def _converts(current: Counts, split: Counts) -> bool:
    grows = any(split[role] > current[role] for role in PLANNED_ROLES)
    return grows and any(split[role] < current[role] for role in PLANNED_ROLES)


def _clears_margin(
    needs: Needs,
    current: Counts,
    target: Counts,
    shrinking: list[PlannedRole],
    margin: float,
    fill: bool,
) -> bool:
    """Whether a move that shrinks `shrinking` is worth it: the arrivals' coverage of the worse role rises by the
    margin (filling the budget: always the test; else only when the current counts do not cover the arrivals),
    or the shrunk roles' needs, what waits now included, stay below their new counts by the margin."""
    before = _coverage(current, needs.traffic)
    gains = _coverage(target, needs.traffic) >= before * (1 + margin)
    if fill:
        return gains
    return all(needs.now[role] <= target[role] * (1 - margin) for role in shrinking) or (
        before < 1.0 and gains
    )


def _times(coverage: float) -> str:
    return "nothing needed" if math.isinf(coverage) else f"{coverage:.2f}×"


def _counts(counts: Counts) -> str:
    return f"{counts['prefill']}P+{counts['decode']}D"
