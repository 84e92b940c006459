"""The cluster scheduling benchmark's pure parts: the seeded multi-turn workload and the goodput arithmetic."""

import itertools
import math
import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from cluster_scheduling import Outcome, WorkloadShape, goodput, make_workload, meets_slo


def test_the_workload_is_seeded_and_open_loop() -> None:
    turns = make_workload(6, 60, seed=3)
    assert turns == make_workload(6, 60, seed=3)
    assert turns != make_workload(6, 60, seed=4)
    assert [t.at_s for t in turns] == sorted(t.at_s for t in turns)
    assert all(0 <= t.at_s < 60 for t in turns)
    assert 0.5 * 6 * 60 < len(turns) < 1.2 * 6 * 60, "up to the offered rate"


def test_sessions_grow_their_history_over_shared_system_prompts() -> None:
    shape = WorkloadShape()
    turns = make_workload(6, 60, seed=3, shape=shape)
    by_session: dict[int, list] = {}
    for turn in turns:
        by_session.setdefault(turn.session, []).append(turn)
    multi = [ts for ts in by_session.values() if len(ts) > 1]
    assert multi, "some sessions have several turns"
    for session_turns in multi:
        for earlier, later in itertools.pairwise(session_turns):
            assert later.index > earlier.index
            history = earlier.prompt_words
            assert later.prompt_words[: len(history)] == history, "a turn's prompt extends the previous one"
            assert len(later.prompt_words) > len(history) + earlier.max_tokens - 1, "with the answer in it"
    systems = {t.prompt_words[:50] for t in turns if t.index == 0}
    assert len(systems) <= shape.system_prompts < len({t.session for t in turns}), "system prompts are shared"


def test_lengths_are_long_tailed() -> None:
    turns = make_workload(10, 120, seed=1)
    answers = [t.max_tokens for t in turns]
    assert max(answers) > 4 * statistics.median(answers)
    assert all(1 <= a <= WorkloadShape().max_answer_tokens for a in answers)


def test_goodput_counts_requests_within_both_objectives() -> None:
    fast = Outcome(True, ttft_s=0.5, gaps_s=[0.05] * 99 + [0.09], tokens=101)
    slow_start = Outcome(True, ttft_s=2.5, gaps_s=[0.01], tokens=2)
    stuttering = Outcome(True, ttft_s=0.1, gaps_s=[0.01] * 50 + [0.3] * 2, tokens=53)
    failed = Outcome(False, error="HTTP 503")
    one_token = Outcome(True, ttft_s=1.0, tokens=1)
    outcomes = [fast, slow_start, stuttering, failed, one_token]
    assert [meets_slo(o, 2.0, 0.1) for o in outcomes] == [True, False, False, False, True]
    assert goodput(outcomes, 10.0, 2.0, 0.1) == pytest.approx(0.2)
    assert goodput(outcomes, 10.0, 3.0, 0.5) == pytest.approx(0.4)
    assert math.isinf(failed.ttft_s)
