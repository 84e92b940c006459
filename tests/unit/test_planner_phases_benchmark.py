"""The planner phases benchmark's pure parts: the seeded phase schedule and its warm-up, a phase played alone,
the goodput rules, and the capacity model's prediction of the split each phase wants."""

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from planner_phases import (
    BUDGET,
    PHASES,
    Change,
    Outcome,
    Run,
    Sent,
    alone,
    coverage,
    make_schedule,
    predicted_need,
    split_name,
    static_splits,
    within_slo,
)


def test_the_schedule_is_seeded_and_its_phases_do_not_depend_on_the_warm_up() -> None:
    turns = make_schedule(PHASES, 60.0, seed=2, warm_up_s=20.0)
    assert turns == make_schedule(PHASES, 60.0, seed=2, warm_up_s=20.0)
    assert [t.index for t in turns] == list(range(len(turns)))
    assert [t.at_s for t in turns] == sorted(t.at_s for t in turns)
    warm_up = [t for t in turns if t.session < 0]
    assert warm_up and all(-20.0 <= t.at_s < 0 for t in warm_up)
    phases = [t for t in turns if t.session >= 0]
    without = make_schedule(PHASES, 60.0, seed=2)
    assert [(t.at_s, t.prompt_words, t.max_tokens) for t in phases] == [
        (t.at_s, t.prompt_words, t.max_tokens) for t in without
    ]
    for index, phase in enumerate(PHASES):
        mine = [t for t in phases if t.session == index]
        assert all(index * 60.0 <= t.at_s < (index + 1) * 60.0 for t in mine)
        assert 0.6 * phase.rate * 60 < len(mine) < 1.6 * phase.rate * 60


def test_the_phases_differ_as_their_names_say() -> None:
    turns = make_schedule(PHASES, 75.0, seed=1)
    prompt = [statistics.median(len(t.prompt_words) for t in turns if t.session == k) for k in range(3)]
    answer = [statistics.median(t.max_tokens for t in turns if t.session == k) for k in range(3)]
    assert prompt[0] > 10 * prompt[1] and answer[1] > 5 * answer[0]
    assert prompt[1] < prompt[2] < prompt[0] and answer[0] < answer[2] < answer[1]


def test_a_phase_alone_starts_at_zero_after_the_warm_up() -> None:
    turns = make_schedule(PHASES, 60.0, seed=2, warm_up_s=10.0)
    played = alone(turns, 2, 60.0)
    assert [t for t in played if t.session < 0] == [t for t in turns if t.session < 0]
    mine = [t for t in played if t.session >= 0]
    assert {t.session for t in mine} == {2} and all(0 <= t.at_s < 60.0 for t in mine)
    assert [t.index for t in mine] == [t.index for t in turns if t.session == 2]


def test_goodput_counts_every_request_sent_and_tpot_forgives_one_late_step() -> None:
    turns = make_schedule(PHASES, 10.0, seed=1)[:4]
    late_step = Outcome(True, ttft_s=0.5, gaps_s=[0.03] * 49 + [0.2], tokens=51)
    outcomes = [
        late_step,
        Outcome(True, ttft_s=2.5, gaps_s=[0.01], tokens=2),  # past the TTFT objective
        Outcome(False, error="HTTP 503"),
        Outcome(True, ttft_s=0.1, gaps_s=[0.06] * 10, tokens=11),  # decodes too slowly
    ]
    assert [within_slo(o) for o in outcomes] == [True, False, False, False]
    assert not within_slo(late_step, rule="P99")
    run = Run(
        "x",
        [Sent(t, t.at_s, t.at_s + 1, o) for t, o in zip(turns, outcomes, strict=True)],
        [],
        [],
        (0, 0),
        0,
        [],
    )
    assert run.goodput(0, 10.0) == 0.1


def test_a_failure_during_overlapping_changes_is_lost_once() -> None:
    turn = make_schedule(PHASES, 10.0, seed=1)[0]
    failed = Sent(turn, 5.0, 9.0, Outcome(False, error="HTTP 503"))
    before = Sent(turn, 0.0, 1.0, Outcome(False, error="HTTP 503"))  # ended before any change began
    counts = {"prefill": 4, "decode": 4}
    changes = [
        Change(4.0, "convert", counts, counts, "", ended_s=8.0),
        Change(6.0, "scale", counts, counts, ""),  # never ended: in progress until the run's end
    ]
    run = Run("planner", [failed, before], [], changes, (0, 0), 0, [])
    assert run.lost_to_changes() == [failed]


def test_the_capacity_model_wants_a_different_split_in_each_phase() -> None:
    turns = make_schedule(PHASES, 75.0, seed=1)
    best = []
    for index in range(len(PHASES)):
        need = predicted_need([t for t in turns if t.session == index], 75.0)
        covered = {split_name(split): coverage(split, need) for split in static_splits(BUDGET)}
        best.append(max(covered, key=covered.__getitem__))
        assert sorted(covered.values())[-1] >= 1.0, "the budget can serve every phase"
        assert sum(c >= 1.0 for c in covered.values()) <= 3, "but only a few splits can"
    assert (
        best[0].startswith(("6P", "7P"))
        and best[1].startswith(("1P", "2P"))
        and best[2] in ("3P+5D", "4P+4D")
    )
