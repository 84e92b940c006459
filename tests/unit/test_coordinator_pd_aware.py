"""The pd_aware policy's plugins one by one (queued-prefill, KV-held and batch scorers, the admission filter, the
pool-hit estimate) and the policy as the scheduler runs it: prefill by compute left after expected pool hits,
decode by KV held and batch, admission bounds that make a pick wait instead of overloading an engine."""

from motor.coordinator.scheduling.filters import AdmissionFilter
from motor.coordinator.scheduling.pool_hits import PoolHits
from motor.coordinator.scheduling.scorers import BatchScorer, KvHeldScorer, QueuedPrefillScorer
from tests.unit.test_coordinator_scheduling import demand, endpoints, load_of, scheduler_with

SYSTEM = "a shared system prompt of many words, " * 8  # 312 characters: 78 estimated tokens


def test_queued_prefill_scores_by_tokens_still_to_compute_not_by_kv_held() -> None:
    members = endpoints(3, [0, 500, 2000])
    members[0].kv = 50_000  # a prefill engine still holding KV for a decode has no less compute to give
    scores = QueuedPrefillScorer(half=1000).score(members, demand())
    assert scores == [1.0, 1000 / 1500, 1000 / 3000]


def test_kv_held_scorer_prefers_headroom() -> None:
    members = endpoints(3)
    for endpoint, kv in zip(members, [0, 8000, 24000], strict=True):
        endpoint.kv = kv
    assert KvHeldScorer(half=8000).score(members, demand()) == [1.0, 0.5, 0.25]


def test_batch_scorer_prefers_small_batches() -> None:
    members = endpoints(3)
    for endpoint, legs in zip(members, [0, 16, 48], strict=True):
        endpoint.in_flight = legs
    assert BatchScorer(half=16).score(members, demand()) == [1.0, 0.5, 0.25]


def test_admission_filter_keeps_endpoints_below_their_bounds() -> None:
    members = endpoints(3, [100, 999, 1000])
    for endpoint, legs in zip(members, [0, 3, 1], strict=True):
        endpoint.in_flight = legs
    by_tokens = AdmissionFilter(max_tokens=1000)
    assert by_tokens.apply(members, demand(), frozenset()) == members[:2]
    by_requests = AdmissionFilter(max_requests=3)
    assert by_requests.apply(members, demand(), frozenset()) == [members[0], members[2]]
    assert AdmissionFilter().apply(members, demand(), frozenset()) == members


def test_pool_hits_count_the_leading_blocks_any_instance_was_given() -> None:
    hits = PoolHits(block_size=4)
    first = demand(SYSTEM + "first question", tokens=82)
    assert hits.expected_hit_tokens(first) == 0
    members = endpoints(2)
    hits.picked(members[0], first)
    assert first.pool_hit_tokens == 0 and first.prefill_tokens == 82
    second = demand(SYSTEM + "another question entirely", tokens=85)
    hits.picked(members[1], second)  # another instance: the pool is shared
    assert second.pool_hit_tokens == 76, "19 full blocks of 4 tokens of the system prompt are in the pool"
    assert second.prefill_tokens == 85 - 76
    hits.picked(members[0], second)
    assert second.pool_hit_tokens == 76, "a retry keeps the estimate made before the prompt was remembered"
    assert demand("", tokens=0).prefill_tokens == 1


def test_pd_aware_places_prefill_by_compute_left_after_pool_hits() -> None:
    scheduler, _ = scheduler_with("pd_aware", 2, affinity_block_size=4)
    seen = demand(SYSTEM + "q1", tokens=79)
    owner = scheduler.pick("prefill", seen)
    assert owner is not None
    scheduler.allocate(owner, seen.prefill_tokens, seen.prompt_tokens)
    assert load_of(scheduler, owner)["tokens"] == 79, "nothing was in the pool yet"

    repeat = demand(SYSTEM + "q2", tokens=79)
    other = scheduler.pick("prefill", repeat)
    assert other is not None and other is not owner, "the prefix owner is busier: the pool serves anyone"
    scheduler.allocate(other, repeat.prefill_tokens, repeat.prompt_tokens)
    assert load_of(scheduler, other)["tokens"] == 79 - 76, "only what the pool lacks is charged"
    assert load_of(scheduler, other)["kv_tokens"] == 79


def test_pd_aware_places_decode_by_kv_held_and_batch() -> None:
    scheduler, targets = scheduler_with("pd_aware", 3, role="decode")
    scheduler.allocate(targets[0], 10, 20_000)  # much KV held
    for _ in range(40):
        scheduler.allocate(targets[1], 10, 10)  # a large batch of short sequences
    scheduler.allocate(targets[2], 10, 2_000)
    assert scheduler.pick("decode", demand()) is targets[2]


def test_pd_aware_admission_makes_a_saturated_role_wait_for_released_load() -> None:
    scheduler, targets = scheduler_with("pd_aware", 2, role="decode", admission_max_decode_requests=1)
    allocations = [scheduler.allocate(target, 10, 10) for target in targets]
    assert scheduler.pick("decode", demand()) is None and scheduler.saturated("decode")
    woken: list[str] = []
    scheduler.when_released(lambda: woken.append("room"))
    allocations[1].release()
    assert woken == ["room"] and scheduler.pick("decode", demand()) is targets[1]
    allocations[0].release()
    assert woken == ["room"], "a waiter is called once"


def test_only_pd_aware_admits_by_load() -> None:
    for policy in ("round_robin", "load_balance", "prefix_affinity", "pd_aware"):
        scheduler, [target] = scheduler_with(policy, 1, admission_max_prefill_tokens=100)
        scheduler.allocate(target, 1000, 1000)  # ten times the admission bound queued on the only engine
        if policy == "pd_aware":
            assert scheduler.pick("prefill", demand()) is None and scheduler.saturated("prefill")
        else:
            assert scheduler.pick("prefill", demand()) is target, policy
            assert not scheduler.saturated("prefill"), policy
    empty, _ = scheduler_with("pd_aware", 0)
    assert not empty.saturated("prefill"), "no instance registered is not saturation"
