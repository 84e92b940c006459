"""The cluster scheduling benchmark's pure parts: the seeded multi-turn workload and the goodput arithmetic."""

import collections
import itertools
import math
import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from cluster_scheduling import (
    REFERENCE_CAPACITY,
    Outcome,
    WorkloadShape,
    admission_bounds,
    cluster_capacity,
    describe_kv_counters,
    goodput,
    make_scenario,
    make_workload,
    meets_slo,
    motor_policy,
)


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


def test_larger_clusters_get_proportionally_slower_decode_steps() -> None:
    reference = cluster_capacity(4)
    assert reference == REFERENCE_CAPACITY
    for engines in (8, 16):
        model = cluster_capacity(engines)
        slowdown = engines / 4
        assert model.prefill_tokens_per_s == reference.prefill_tokens_per_s, "a lone prompt's TTFT stays"
        assert model.decode_ms_per_seq == reference.decode_ms_per_seq * slowdown
        assert model.decode_ms_per_1k_context == reference.decode_ms_per_1k_context * slowdown
        assert model.step_overhead_ms == reference.step_overhead_ms
        # what a step costs beyond its fixed overhead grows by the slowdown, for any batch and context
        for n in (1, 5):
            extra = model.step_seconds(prefill_tokens=0, decode_seqs=n, context_tokens=n * 1500)
            ref = reference.step_seconds(prefill_tokens=0, decode_seqs=n, context_tokens=n * 1500)
            overhead = reference.step_overhead_ms / 1000
            assert extra - overhead == pytest.approx(slowdown * (ref - overhead))


def test_admission_bounds_follow_the_engine() -> None:
    assert admission_bounds(cluster_capacity(4)) == {
        "admission_max_prefill_tokens": 1500,  # 1.5 s of prefill at 1,000 tokens/s
        "admission_max_decode_requests": 10,  # 5 + 10 × (6 + 2) = 85 ms a step at 1,000 tokens of context
        "admission_queue_timeout": 2.0,
    }
    eight = admission_bounds(cluster_capacity(8))
    assert eight["admission_max_prefill_tokens"] == 1500 and eight["admission_max_decode_requests"] == 5
    assert admission_bounds(cluster_capacity(64))["admission_max_decode_requests"] == 1, "never 0"


def test_motor_policies_take_kv_affinity_weights() -> None:
    assert motor_policy("prefix_affinity") == ("prefix_affinity", {})
    assert motor_policy("kv_cache_affinity@prefill_load_scale=10;mode=load_gated;load_gate_topn=3") == (
        "kv_cache_affinity",
        {"prefill_load_scale": 10, "mode": "load_gated", "load_gate_topn": 3},
    )
    with pytest.raises(ValueError, match="only kv_cache_affinity takes weights"):
        motor_policy("load_balance@load_weight=2")
    with pytest.raises(ValueError, match="is not KEY=VALUE"):
        motor_policy("kv_cache_affinity@prefill_load_scale")


def test_cache_pressure_tenants_can_be_skewed() -> None:
    def first_tenant_share(exponent: float) -> float:
        """The share of sessions on the most popular tenant's prefix."""
        shape = make_scenario("cache-pressure", 8, exponent).shape
        firsts = [turn for turn in make_workload(6, 60, seed=1, shape=shape) if turn.index == 0]
        tenants = collections.Counter(turn.prompt_words[: shape.system_median_tokens] for turn in firsts)
        return tenants.most_common(1)[0][1] / len(firsts)

    assert make_scenario("cache-pressure", 8).shape.system_prompts == 23
    assert first_tenant_share(0.0) < 0.2
    assert first_tenant_share(2.0) > 0.45


def test_the_coordinators_kv_figures_are_what_the_row_added() -> None:
    predicted, pool = "motor_coordinator_kv_predictions_total", "motor_coordinator_kv_pool_queries_total"
    before = {(predicted, "exact"): 10.0, (pool, "answered"): 4.0}
    after = {(predicted, "exact"): 25.0, (predicted, "under"): 2.0, (pool, "answered"): 4.0}
    assert describe_kv_counters(before, after) == "predicted: exact 15, under 2"
    assert describe_kv_counters({}, {}) == ""
