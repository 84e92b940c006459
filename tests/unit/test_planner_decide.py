"""The planner's decision, table-driven: given figures (and the memory of earlier decisions) → targets, kind and
reason (motor/planner/decide.py, docs/planner.md#how-it-decides).

The engines of the table: a prefill instance computes 1,000 prompt tokens/s; a decode instance's step takes
5 ms + 12 ms per sequence, so it holds 7.9 sequences within the 100 ms ITL objective: 79 tokens/s."""

from dataclasses import replace
from typing import Any

import pytest

from motor.config.models import PlannerConfig
from motor.config.planner import planner_bounds
from motor.planner.decide import Decision, Figures, Memory, decide

NO_ACCELERATORS = {"prefill": 0, "decode": 0}


def config(**overrides: Any) -> PlannerConfig:
    return PlannerConfig(enable=True, max_instances=8, **overrides)


def figures(prefill: int, decode: int, **measured: Any) -> Figures:
    counts = {"prefill": prefill, "decode": decode}
    engines = {"prefill_tokens_per_s": 1000.0, "decode_tokens_per_s": 79.0, "decode_batch": 7.9}
    return Figures(counts=counts, active=dict(counts), **{**engines, **measured})


PROMPT_HEAVY = {"arrival_rate": 5.0, "prompt_tokens": 800.0, "output_tokens": 20.0}
ANSWER_HEAVY = {"arrival_rate": 2.0, "prompt_tokens": 100.0, "output_tokens": 200.0}
MIXED = {"arrival_rate": 3.0, "prompt_tokens": 400.0, "output_tokens": 60.0}
OVERLOAD = {"arrival_rate": 8.0, "prompt_tokens": 800.0, "output_tokens": 60.0}


def run(
    seen: Figures, planner: PlannerConfig | None = None, memory: Memory | None = None, now: float = 100.0
) -> tuple[Decision, Memory]:
    planner = planner or config()
    bounds = planner_bounds(planner, dict(NO_ACCELERATORS))  # type: ignore[arg-type]
    return decide(seen, planner, bounds, memory or Memory(), now)


AGREED = Memory(proposal=None, streak=0)
FILL = config(fill_budget=True)


@pytest.mark.parametrize(
    ("case", "seen", "planner", "memory", "kind", "targets", "words"),
    [
        # prefill 5/s × 800 / (1000 × 73 %) = 5.5; decode 5 × 20 / (79 × 85 %) = 1.5
        ("prompt-heavy", figures(4, 4, **PROMPT_HEAVY), None, None, "hold", (4, 4), "1 of 2 times"),
        ("prompt-heavy, agreed", figures(4, 4, **PROMPT_HEAVY), None, Memory(proposal=(6, 2), streak=1),
         "convert", (6, 2), "prefill needs 5.45"),
        # prefill 2 × 100 / 850 = 0.2; decode 2 × 200 / 67.2 = 6.0
        ("answer-heavy", figures(1, 2, **ANSWER_HEAVY), None, None, "scale", (1, 6), "decode needs 5.96"),
        # prefill 3 × 400 / 850 = 1.4; decode 3 × 60 / 67.2 = 2.7
        ("mixed", figures(1, 1, **MIXED), None, None, "scale", (2, 3), "→ 2P+3D"),
        ("mixed, met", figures(2, 3, **MIXED), None, None, "hold", (2, 3), "2P+3D meets it"),
        # 8,000 queued prompt tokens: 8000 / (1000 × 1.9 s) = 4.2 prefill instances, at once
        ("burst", figures(2, 3, **MIXED, prefill_queued_tokens=8000.0), None, None, "scale", (5, 3),
         "8,000 queued tokens"),
        ("decode backlog", figures(2, 3, **MIXED, decode_sequences=40.0), None, None, "scale", (2, 6),
         "40 sequences in decode"),
        # the burst's prefill grows now; the decode side, which could shrink from 4 to 3, waits its turn
        ("burst, shrinking waits", figures(2, 4, **MIXED, prefill_queued_tokens=8000.0),
         PlannerConfig(enable=True, max_instances=10), None, "scale", (5, 4), "shrinking waits: proposed 1 of 2"),
        ("burst, little room", figures(2, 4, **MIXED, prefill_queued_tokens=8000.0), None, None, "scale", (4, 4),
         "shrinking waits: proposed 1 of 2"),
        # a queue grows a role into free budget only: under a full budget it converts nothing (the traffic's
        # split, 2P+3D, waits while the prefill queue needs 4.2)
        ("burst, no room", figures(4, 4, **MIXED, prefill_queued_tokens=8000.0), None, None, "hold", (4, 4),
         "4.21 with 8,000 queued tokens; decode needs 2.68"),
        ("burst, no room, filling the budget", figures(4, 4, **MIXED, prefill_queued_tokens=8000.0), FILL, None,
         "hold", (4, 4), "4P+4D covers both needs by the margin (1.49×)"),
        ("decode backlog, no room", figures(2, 6, **MIXED, decode_sequences=60.0), FILL, None, "hold", (2, 6),
         "2P+6D covers both needs by the margin (1.42×)"),
        ("idle", figures(4, 4, arrival_rate=0.0), None, Memory(proposal=(1, 1), streak=1), "scale", (1, 1),
         "idle"),
        ("idle, first look", figures(4, 4, arrival_rate=0.0), None, None, "hold", (4, 4), "1 of 2 times"),
        ("bounds", figures(2, 2, **ANSWER_HEAVY), config(min_prefill=2, max_decode=3), None, "scale", (2, 3),
         "→ 2P+3D"),
        # needs 8.7 prefill and 7.1 decode; the budget of 8 covers both alike at 4P+4D
        ("budget", figures(2, 2, **OVERLOAD), None, None, "scale", (4, 4), "→ 4P+4D"),
        ("budget, 2 accelerators each", figures(2, 2, **OVERLOAD), PlannerConfig(enable=True,
         max_accelerators=12), None, "scale", (3, 3), "→ 3P+3D"),
        ("no conversion", figures(4, 4, **ANSWER_HEAVY), config(enable_role_conversion=False),
         Memory(proposal=(1, 6), streak=1), "hold", (4, 4), "4P+4D is the most the bounds and budget allow without role conversion"),
        ("conversion", figures(4, 4, **ANSWER_HEAVY), None, Memory(proposal=(1, 6), streak=1), "convert",
         (1, 6), "→ 1P+6D (now 4P+4D)"),
        # filling the budget: the split of all 8 that covers the worse role best, not the fewest that suffice
        ("fill, answer-heavy", figures(4, 4, **ANSWER_HEAVY), FILL, Memory(proposal=(1, 7), streak=1), "convert",
         (1, 7), "→ 1P+7D (now 4P+4D)"),
        ("fill, kept by the margin", figures(4, 4, **MIXED), FILL, None, "hold", (4, 4),
         "4P+4D covers both needs by the margin (1.49×)"),
        ("fill, below the budget", figures(2, 3, **MIXED), FILL, None, "scale", (3, 5), "→ 3P+5D (now 2P+3D)"),
        ("fill, idle", figures(4, 4, arrival_rate=0.0), FILL, Memory(proposal=(1, 1), streak=1), "hold", (4, 4),
         "idle (nothing arrives, nothing queued): 4P+4D meets it"),
        # needs 3.9 prefill and 3.05 decode: 4P+4D covers 1.03×, 5P+3D 0.98×: less than the margin to gain
        ("fill, small gain", figures(5, 3, arrival_rate=10.0, prompt_tokens=331.5, output_tokens=20.48), FILL,
         Memory(proposal=(4, 4), streak=1), "hold", (5, 3), "→ 4P+4D (now 5P+3D): within the hysteresis margin"),
        ("missing capacity", figures(2, 2, **MIXED, prefill_tokens_per_s=None), None, None, "hold", (2, 2),
         "missing figures: prefill capacity"),
        ("missing output", figures(2, 2, arrival_rate=1.0, prompt_tokens=10.0), None, None, "hold", (2, 2),
         "missing figures: output tokens per request"),
        ("no rate yet", figures(2, 2), None, None, "hold", (2, 2), "no arrival rate"),
        ("in progress", figures(1, 1, **MIXED, changing="decode-2 starting"), None, None, "hold", (1, 1),
         "waiting: decode-2 starting"),
        ("cooldown", figures(1, 1, **MIXED), None, Memory(changes=(95.0,)), "hold", (1, 1), "cooldown, 5 s left"),
        ("changes per minute", figures(1, 1, **MIXED), config(cooldown_s=0.0, max_changes_per_minute=2),
         Memory(changes=(50.0, 90.0)), "hold", (1, 1), "2 changes in the last minute"),
        ("a minute later", figures(1, 1, **MIXED), config(cooldown_s=0.0, max_changes_per_minute=2),
         Memory(changes=(30.0, 90.0)), "scale", (2, 3), "→ 2P+3D"),
    ],
)  # fmt: skip
def test_decision_table(
    case: str,
    seen: Figures,
    planner: PlannerConfig | None,
    memory: Memory | None,
    kind: str,
    targets: tuple[int, int],
    words: str,
) -> None:
    if planner is not None and planner.max_accelerators is not None:
        bounds = planner_bounds(planner, {"prefill": 2, "decode": 2})
        decision, _ = decide(seen, planner, bounds, memory or Memory(), 100.0)
    else:
        decision, _ = run(seen, planner, memory)
    assert (decision.kind, decision.targets["prefill"], decision.targets["decode"]) == (kind, *targets), (
        decision.reason
    )
    assert words in decision.reason, decision.reason


def test_a_change_is_remembered_for_the_cooldown_and_the_rate_limit() -> None:
    decision, memory = run(figures(1, 1, **MIXED), now=100.0)
    assert decision.kind == "scale" and memory == Memory(changes=(100.0,))
    decision, _ = run(figures(2, 3, **OVERLOAD), memory=memory, now=104.0)
    assert decision.kind == "hold" and "cooldown, 6 s left" in decision.reason
    decision, _ = run(figures(2, 3, **OVERLOAD), memory=memory, now=111.0)
    assert decision.kind == "scale" and decision.targets == {"prefill": 4, "decode": 4}


def test_no_flapping_around_a_boundary() -> None:
    """Prefill need alternating just above and just below 3 instances: up to 4 once, then held there."""
    needs = [3.05, 2.95, 3.05, 2.95, 2.9, 2.95]  # × 850 tokens/s at 1 request/s of that many 1000s of tokens
    counts, memory, changes = (3, 1), Memory(), []
    for step, need in enumerate(needs):
        seen = figures(*counts, arrival_rate=1.0, prompt_tokens=need * 850.0, output_tokens=1.0)
        decision, memory = run(seen, config(cooldown_s=0.0), memory, now=100.0 + 5 * step)
        if decision.kind != "hold":
            counts = (decision.targets["prefill"], decision.targets["decode"])
            changes.append(counts)
    assert changes == [(4, 1)]
    # well below the margin (3 × 0.9 = 2.7) for two decisions in a row, it comes down
    for step in range(2):
        seen = figures(*counts, arrival_rate=1.0, prompt_tokens=2.5 * 850.0, output_tokens=1.0)
        decision, memory = run(seen, config(cooldown_s=0.0), memory, now=200.0 + 5 * step)
    assert decision.kind == "scale" and decision.targets == {"prefill": 3, "decode": 1}


def test_filling_the_budget_no_flapping_between_splits_that_both_cover() -> None:
    """Prefill needing 5 while the decode need jumps between 1.2 and 0.7: at 1.2, 7P+1D does not cover it and
    6P+2D does; back at 0.7, 7P+1D would cover both better (1.4×), but 6P+2D still covers both by the margin
    (1.2×) and is kept."""
    counts, memory, changes = (7, 1), Memory(), []
    for step, output_tokens in enumerate([16.1, 16.1, 9.4, 9.4, 16.1, 16.1, 9.4, 9.4]):
        shape = {"arrival_rate": 5.0, "prompt_tokens": 750.0, "output_tokens": output_tokens}
        decision, memory = run(figures(*counts, **shape), config(fill_budget=True, cooldown_s=0.0), memory,
                               now=100.0 + 5 * step)  # fmt: skip
        if decision.kind != "hold":
            counts = (decision.targets["prefill"], decision.targets["decode"])
            changes.append(counts)
    assert changes == [(6, 2)]


def test_a_need_still_drifting_after_a_phase_change_agrees_once_it_settles() -> None:
    """A prompt-heavy phase turning answer-heavy: each decision proposes less prefill and more decode than
    6P+2D. A target that jumps by more than an instance (4P+4D, then 2P+6D) starts the count again; one within an
    instance of the one before (2P+6D, then 1P+7D) agrees, and the latest is made."""
    seen = figures(6, 2, arrival_rate=5.0, prompt_tokens=400.0, output_tokens=40.0)
    decision, memory = run(seen, FILL)
    assert decision.kind == "hold" and memory.proposal == (4, 4), decision.reason
    decision, memory = run(replace(seen, prompt_tokens=200.0, output_tokens=60.0), FILL, memory)
    assert decision.kind == "hold" and memory.proposal == (2, 6) and memory.streak == 1, decision.reason
    decision, _ = run(replace(seen, prompt_tokens=100.0, output_tokens=70.0), FILL, memory)
    assert decision.kind == "convert" and decision.targets == {"prefill": 1, "decode": 7}, decision.reason


def test_a_proposal_that_changes_starts_its_count_again() -> None:
    _, memory = run(figures(4, 4, arrival_rate=0.0))
    assert memory.streak == 1
    decision, memory = run(figures(4, 4, **ANSWER_HEAVY), memory=memory)
    assert decision.kind == "hold" and "1 of 2 times" in decision.reason and memory.proposal == (1, 6)


def test_never_outside_the_bounds_and_the_budget() -> None:
    planner = PlannerConfig(enable=True, min_prefill=2, max_prefill=5, min_decode=2, max_instances=9)
    bounds = planner_bounds(planner, dict(NO_ACCELERATORS))  # type: ignore[arg-type]
    for rate in (0.0, 0.5, 2.0, 8.0, 40.0):
        for shape in (PROMPT_HEAVY, ANSWER_HEAVY, MIXED):
            seen = replace(figures(3, 3, **shape), arrival_rate=rate)
            decision, _ = decide(seen, planner, bounds, Memory(proposal=None), 0.0)
            for _ in range(3):
                decision, _ = decide(
                    seen,
                    planner,
                    bounds,
                    Memory(proposal=(decision.targets["prefill"], decision.targets["decode"]), streak=5),
                    0.0,
                )
            targets = decision.targets
            assert 2 <= targets["prefill"] <= 5 and targets["decode"] >= 2
            assert sum(targets.values()) <= 9
