"""Scheduling: the filters, scorers and pickers one by one, the policies built from them, the compiled deciders
(heap, cursor) giving exactly the generic path's answers, and the O(log n) cost of the heap path."""

import math
import random

import pytest

from motor.coordinator.registry import InstanceRegistry, Target
from motor.coordinator.scheduling.compiled import CursorDecider, GenericDecider, HeapDecider, compile_profile
from motor.coordinator.scheduling.demand import Demand
from motor.coordinator.scheduling.filters import ExcludedFilter, LoadRatioFilter, RoleFilter, RoutableFilter
from motor.coordinator.scheduling.heap import LoadHeap
from motor.coordinator.scheduling.load import EndpointLoad, Pool
from motor.coordinator.scheduling.pickers import MaxScorePicker, RoundRobinPicker
from motor.coordinator.scheduling.prefix import PrefixIndex, text_block_hashes, token_block_hashes
from motor.coordinator.scheduling.profiles import PolicyOptions, SchedulingProfile, build_profile
from motor.coordinator.scheduling.scheduler import Scheduler
from motor.coordinator.scheduling.scorers import LoadScorer, PrefixAffinityScorer
from motor.protocol.instances import Endpoint, Instance, InstanceEvent

POLICIES = ["round_robin", "load_balance", "prefix_affinity"]


def make_target(i: int, role: str = "prefill", instance: str | None = None, routable: bool = True) -> Target:
    return Target(
        key=f"i{i}@h:{i}",
        instance_id=instance or f"i{i}",
        role=role,  # type: ignore[arg-type]
        engine_id=f"e{i}",
        model_name="m",
        host="127.0.0.1",
        port=1000 + i,
        bootstrap_port=None,
        routable=routable,
    )


def endpoints(n: int, loads: list[float] | None = None) -> list[EndpointLoad]:
    result = [EndpointLoad(make_target(i)) for i in range(n)]
    for endpoint, load in zip(result, loads or [], strict=False):
        endpoint.tokens = load
    Pool(result)  # positions and the never-picked order
    return result


def scheduler_with(
    policy: str, n: int, role: str = "prefill", **kwargs: object
) -> tuple[Scheduler, list[Target]]:
    scheduler = Scheduler(policy, **kwargs)  # type: ignore[arg-type]
    targets = [make_target(i, role) for i in range(n)]
    scheduler.set_targets(targets)
    return scheduler, targets


def demand(prompt: str = "", tokens: int = 100) -> Demand:
    return Demand(prompt_tokens=tokens, max_new_tokens=10, prompt_text=prompt)


def load_of(scheduler: Scheduler, target: Target) -> dict[str, float]:
    """The endpoint's in-flight load in the management view (its health fields are tested with the stalls)."""
    view = scheduler.endpoint_load()[target.key]
    return {key: view[key] for key in ("in_flight", "tokens", "kv_tokens")}  # type: ignore[misc]


# ---- heap ----------------------------------------------------------------------------------------------------


def test_heap_orders_by_load_then_least_recent_pick_under_random_updates() -> None:
    rng = random.Random(7)
    members = endpoints(50)
    heap = LoadHeap(members)
    for step in range(2000):
        endpoint = rng.choice(members)
        if rng.random() < 0.1 and endpoint in heap:
            heap.remove(endpoint)
        elif endpoint not in heap:
            heap.push(endpoint)
        endpoint.tokens = rng.randint(0, 20)
        endpoint.last_pick = step
        heap.update(endpoint)
        inside = [e for e in members if e in heap]
        best = min((e.load, e.last_pick) for e in inside)
        top = heap.peek()
        assert top is not None and (top.load, top.last_pick) == best


def test_smallest_excluding_skips_excluded_instances() -> None:
    members = endpoints(20, loads=list(range(20)))
    heap = LoadHeap(members)
    assert heap.smallest_excluding(set()) is members[0]
    assert heap.smallest_excluding({"i0", "i1", "i2"}) is members[3]
    assert heap.smallest_excluding({f"i{i}" for i in range(20)}) is None


# ---- filters -------------------------------------------------------------------------------------------------


def test_role_and_routable_filters_judge_the_registration() -> None:
    assert RoleFilter("decode").keep(make_target(0, "decode"))
    assert not RoleFilter("decode").keep(make_target(0, "prefill"))
    assert RoutableFilter().keep(make_target(0))
    assert not RoutableFilter().keep(make_target(0, routable=False))


def test_excluded_filter_drops_every_endpoint_of_an_excluded_instance() -> None:
    members = [EndpointLoad(make_target(i, instance=f"inst{i // 2}")) for i in range(6)]
    kept = ExcludedFilter().apply(members, demand(), {"inst1"})
    assert [e.key for e in kept] == ["i0@h:0", "i1@h:1", "i4@h:4", "i5@h:5"]


def test_load_ratio_filter_counts_the_request_on_both_sides_and_always_keeps_the_least_loaded() -> None:
    members = endpoints(4, loads=[50, 200, 201, 300])
    # cost 100: bound = 2 × (50 + 100) = 300, and load + 100 ≤ 300 keeps 50 and 200 (not 201 or 300)
    kept = LoadRatioFilter(2.0).apply(members, demand(tokens=100), frozenset())
    assert [e.tokens for e in kept] == [50, 200]
    assert LoadRatioFilter(1.0).apply(members[1:], demand(tokens=0), frozenset()) == [members[1]]
    with pytest.raises(ValueError, match="at least 1"):
        LoadRatioFilter(0.5)


# ---- scorers -------------------------------------------------------------------------------------------------


def test_load_scorer_is_one_when_idle_and_strictly_decreasing() -> None:
    members = endpoints(4, loads=[0, 1024, 1025, 10**9])
    members[1].kv = 0
    scores = LoadScorer().score(members, demand())
    assert scores[0] == 1.0 and scores[1] == 0.5
    assert scores[0] > scores[1] > scores[2] > scores[3] > 0.0


def test_prefix_affinity_scorer_rates_the_owners_of_the_deepest_known_block() -> None:
    index = PrefixIndex()
    scorer = PrefixAffinityScorer(index, block_size=4)
    members = endpoints(3)
    pool = Pool(members)
    shared = "system prompt shared by every request " * 4
    assert scorer.score(members, demand(shared)) == [0.0, 0.0, 0.0]
    assert scorer.sparse_scores(pool, demand(shared)) == {}
    scorer.picked(members[1], demand(shared))
    scorer.picked(members[2], demand(shared[:32]))  # a shorter prefix: owns shallower blocks only
    assert scorer.score(members, demand(shared + " tail")) == [0.0, 1.0, 0.0]
    assert scorer.sparse_scores(pool, demand(shared + " tail")) == {members[1]: 1.0}
    assert scorer.sparse_scores(Pool(members[2:]), demand(shared)) == {}, (
        "owners outside the pool are not rated"
    )
    scorer.picked(members[0], demand("short"))  # no full block: nothing to remember
    assert len(index) == len(text_block_hashes(shared, 4))


# ---- pickers -------------------------------------------------------------------------------------------------


def test_max_score_picker_takes_the_highest_total_then_the_least_recently_picked() -> None:
    members = endpoints(4)
    for endpoint, last_pick in zip(members, [7, 3, 9, 5], strict=True):
        endpoint.last_pick = last_pick
    picker = MaxScorePicker()
    assert picker.pick(members, [0.1, 0.2, 0.9, 0.3]) is members[2]
    assert picker.pick(members, [0.5, 0.5, 0.5, 0.4]) is members[1]


def test_round_robin_picker_moves_a_cursor_over_pool_positions() -> None:
    members = endpoints(4)
    picker = RoundRobinPicker()
    zeros = [0.0] * 4
    assert [picker.pick(members, zeros).key for _ in range(5)] == [e.key for e in (*members, members[0])]
    picker.cursor = 2
    assert picker.pick([members[0], members[1], members[3]], [0.0] * 3) is members[3]
    assert picker.pick([members[0], members[1]], [0.0] * 2) is members[0], "past the last position: wrap"


# ---- policies and their compiled form ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "role", "decider", "scorers"),
    [
        ("round_robin", "prefill", CursorDecider, []),
        ("load_balance", "prefill", HeapDecider, ["load"]),
        ("prefix_affinity", "prefill", HeapDecider, ["prefix_affinity", "load"]),
        ("prefix_affinity", "union", HeapDecider, ["prefix_affinity", "load"]),
        ("prefix_affinity", "decode", HeapDecider, ["load"]),
    ],
)
def test_policies_are_profiles_compiled_to_their_fast_path(
    policy: str, role: str, decider: type, scorers: list[str]
) -> None:
    scheduler, _ = scheduler_with(policy, 4, role)
    compiled = scheduler.decider(role)  # type: ignore[arg-type]
    assert type(compiled) is decider
    assert [scorer.name for scorer, _ in compiled.profile.scorers] == scorers
    assert [f.name for f in compiled.profile.pool_filters] == ["role", "routable"]
    assert compiled.profile.filters[0].name == "excluded"


def test_profiles_the_fast_paths_cannot_run_take_the_generic_path() -> None:
    pool = Pool(endpoints(3))
    pool_filters = (RoleFilter("prefill"), RoutableFilter())
    two_dense = SchedulingProfile(
        pool_filters, (ExcludedFilter(),), ((LoadScorer(), 1.0), (LoadScorer(half=10), 1.0)), MaxScorePicker()
    )
    set_filter_round_robin = SchedulingProfile(pool_filters, (LoadRatioFilter(2.0),), (), RoundRobinPicker())
    weak_preference = SchedulingProfile(
        pool_filters,
        (ExcludedFilter(),),
        ((PrefixAffinityScorer(PrefixIndex(), 4), 0.5), (LoadScorer(), 1.0)),
        MaxScorePicker(),
    )
    assert type(compile_profile(two_dense, pool)) is GenericDecider
    assert type(compile_profile(set_filter_round_robin, pool)) is GenericDecider
    assert type(compile_profile(weak_preference, pool)) is GenericDecider, "a prefix owner may lose on load"


@pytest.mark.parametrize("policy", POLICIES)
def test_compiled_deciders_answer_exactly_like_the_generic_path(policy: str) -> None:
    """Random loads, exclusions and shared prefixes: the heap/cursor decision equals evaluating every filter,
    scorer and the picker over the whole pool."""
    rng = random.Random(policy)
    scheduler, _ = scheduler_with(policy, 40, affinity_block_size=4, affinity_max_load_ratio=1.5)
    prefixes = [f"shared system prompt number {k} " * 3 for k in range(5)]
    allocations = []
    for step in range(1500):
        compiled = scheduler.decider("prefill")
        generic = GenericDecider(compiled.profile, compiled.pool)
        exclude = {f"i{rng.randrange(40)}" for _ in range(rng.choice([0, 0, 1, 3]))}
        request = demand(rng.choice(prefixes) + str(step), tokens=rng.randint(1, 400))
        picker = compiled.profile.picker
        cursor = picker.cursor if isinstance(picker, RoundRobinPicker) else 0
        expected = generic.decide(request, exclude)
        if isinstance(picker, RoundRobinPicker):
            picker.cursor = cursor
        assert compiled.decide(request, exclude) is expected, step
        if isinstance(picker, RoundRobinPicker):
            picker.cursor = cursor
        chosen = scheduler.pick("prefill", request, exclude)
        assert chosen is not None and chosen is expected.target
        allocations.append(scheduler.allocate(chosen, rng.randint(1, 300), rng.randint(0, 300)))
        if len(allocations) > 25:
            allocations.pop(rng.randrange(len(allocations))).release()
        if rng.random() < 0.2:
            rng.choice(allocations).release_tokens()


def test_round_robin_cycles_and_skips_failed_instances() -> None:
    scheduler, _ = scheduler_with("round_robin", 3)
    picks = [scheduler.pick("prefill", demand()) for _ in range(6)]
    assert [t.instance_id for t in picks] == ["i0", "i1", "i2", "i0", "i1", "i2"]
    assert scheduler.pick("prefill", demand(), {"i0"}).instance_id == "i1"
    assert scheduler.pick("prefill", demand(), {"i0", "i1", "i2"}) is None


def test_load_balance_picks_least_loaded_and_spreads_ties() -> None:
    scheduler, targets = scheduler_with("load_balance", 4)
    idle_picks = {scheduler.pick("prefill", demand()).instance_id for _ in range(4)}
    assert idle_picks == {"i0", "i1", "i2", "i3"}, "equal loads must rotate, not pile onto one instance"
    heavy = scheduler.allocate(targets[0], 500, 500)
    scheduler.allocate(targets[1], 10, 0)
    scheduler.allocate(targets[2], 20, 0)
    scheduler.allocate(targets[3], 30, 0)
    assert scheduler.pick("prefill", demand()) is targets[1]
    heavy.release()
    assert load_of(scheduler, targets[0]) == {"in_flight": 0, "tokens": 0, "kv_tokens": 0}
    assert scheduler.pick("prefill", demand()) is targets[0]


def test_allocation_releases_tokens_and_kv_separately_and_only_once() -> None:
    scheduler, targets = scheduler_with("load_balance", 2)
    allocation = scheduler.allocate(targets[0], 100, 40)
    assert load_of(scheduler, targets[0]) == {"in_flight": 1, "tokens": 100, "kv_tokens": 40}
    allocation.release_tokens()
    assert load_of(scheduler, targets[0]) == {"in_flight": 1, "tokens": 0, "kv_tokens": 40}
    allocation.release_kv()
    allocation.release()
    allocation.release()
    assert load_of(scheduler, targets[0]) == {"in_flight": 0, "tokens": 0, "kv_tokens": 0}


def test_prefix_affinity_returns_to_the_instance_that_saw_the_prefix() -> None:
    scheduler, _ = scheduler_with("prefix_affinity", 4, affinity_block_size=4)
    prompt = "system prompt shared by every request " * 20
    first = scheduler.pick("prefill", demand(prompt))
    for suffix in ("a", "b", "c"):
        assert scheduler.pick("prefill", demand(prompt + suffix)) is first
    unrelated = scheduler.pick("prefill", demand("something else entirely " * 20))
    assert unrelated is not first


def test_prefix_affinity_load_guard_spills_a_hot_prefix() -> None:
    scheduler, _ = scheduler_with("prefix_affinity", 3, affinity_block_size=4, affinity_max_load_ratio=2.0)
    prompt = "hot prefix " * 50
    owner = scheduler.pick("prefill", demand(prompt, tokens=100))
    scheduler.allocate(owner, 90, 0)  # 90 + 100 is within 2 × (0 + 100), counting the request: stays
    assert scheduler.pick("prefill", demand(prompt, tokens=100)) is owner
    scheduler.allocate(owner, 1000, 0)  # far beyond the guard: goes to the least loaded
    spilled = scheduler.pick("prefill", demand(prompt, tokens=100))
    assert spilled is not owner and load_of(scheduler, spilled)["tokens"] == 0


def test_prefix_affinity_applies_to_prefill_not_decode() -> None:
    scheduler, _ = scheduler_with("prefix_affinity", 3, "decode", affinity_block_size=4)
    prompt = "p " * 200
    picks = {scheduler.pick("decode", demand(prompt)).key for _ in range(3)}
    assert len(picks) == 3
    assert len(scheduler.prefix_index) == 0


def test_block_hashes_are_chained_and_cover_full_blocks_only() -> None:
    a = text_block_hashes("x" * 40 + "tail", 2)  # 8 chars per block
    b = text_block_hashes("x" * 40 + "different tail", 2)
    assert len(a) == 5 and a == b[:5]
    assert (
        text_block_hashes("abcdefgh" + "12345678", 2)[1] != text_block_hashes("zzzzzzzz" + "12345678", 2)[1]
    )
    assert token_block_hashes(list(range(10)), 4) == token_block_hashes([*range(8), 99], 4)


def test_prefix_index_is_bounded() -> None:
    index = PrefixIndex(capacity_blocks=10)
    for i in range(5):
        index.remember(text_block_hashes(f"{i}" * 80, 2), f"t{i}")
    assert len(index) == 10


# ---- registry and scheduler state across refreshes -----------------------------------------------------------


def instance(name: str, role: str = "prefill", status: str = "active") -> Instance:
    return Instance(
        id=name,
        role=role,  # type: ignore[arg-type]
        engine_id=f"engine-{name}",
        model_name="m",
        endpoints=[Endpoint(host="127.0.0.1", port=9000 + len(name))],
        status=status,  # type: ignore[arg-type]
    )


def test_registry_holds_addresses_and_the_scheduler_keeps_their_load_across_refreshes() -> None:
    registry = InstanceRegistry()
    scheduler = Scheduler("load_balance")
    registry.subscribe(scheduler.set_targets)
    registry.apply(InstanceEvent(event="add", instances=[instance("a"), instance("bb", "decode")]))
    target = registry.targets("prefill")[0]
    allocation = scheduler.allocate(target, 42, 0)
    result = registry.apply(InstanceEvent(event="add", instances=[instance("ccc", status="initial")]))
    assert result.instance_count == 3 and result.version == 2
    assert registry.targets("prefill") == [target], "initial instances are not routable"
    assert load_of(scheduler, target)["tokens"] == 42, "the load survives the refresh"
    assert set(scheduler.endpoint_load()) == {target.key, "bb@127.0.0.1:9002"}
    assert scheduler.pick("prefill", demand()) is target, "only routable endpoints enter the pool"
    registry.apply(InstanceEvent(event="del", instances=[instance("a")]))
    allocation.release()  # released after its endpoint left: harmless
    assert not registry.has_role("prefill") and registry.has_role("decode")
    assert scheduler.pick("prefill", demand()) is None
    registry.apply(InstanceEvent(event="set", instances=[instance("ccc")]))
    assert [t.instance_id for t in registry.targets("prefill")] == ["ccc"] and not registry.has_role("decode")
    assert scheduler.pick("prefill", demand()).instance_id == "ccc"
    assert dict(registry.role_states()) == {("prefill", "active"): 1}


def test_policy_options_reach_the_profiles() -> None:
    options = PolicyOptions(affinity_block_size=16, affinity_max_load_ratio=3.0)
    profile = build_profile("prefix_affinity", "prefill", options)
    ratio = next(f for f in profile.filters if isinstance(f, LoadRatioFilter))
    prefix = next(s for s, _ in profile.scorers if isinstance(s, PrefixAffinityScorer))
    assert ratio.max_ratio == 3.0 and prefix.block_size == 16 and prefix.index is options.prefix_index
    with pytest.raises(ValueError, match="unknown scheduling policy"):
        build_profile("fastest", "prefill", options)  # type: ignore[arg-type]


@pytest.mark.parametrize("policy", ["load_balance", "prefix_affinity"])
def test_decision_cost_grows_logarithmically(policy: str) -> None:
    """Heap steps per decision (pick + allocate + release) stay within c·log2(n) from 16 to 65,536 endpoints."""
    per_decision = {}
    for n in (16, 256, 4096, 65536):
        scheduler, targets = scheduler_with(policy, n, affinity_block_size=4)
        rng = random.Random(n)
        for _ in range(n // 2):  # uneven background load
            scheduler.allocate(targets[rng.randrange(n)], rng.randint(1, 500), 0)
        before = scheduler.heap_steps("prefill")
        decisions = 500
        for i in range(decisions):
            target = scheduler.pick("prefill", demand(f"prompt {i % 7} " * 40), {"p1", "p2"})
            allocation = scheduler.allocate(target, 100, 100)
            allocation.release()
        per_decision[n] = (scheduler.heap_steps("prefill") - before) / decisions
    for n, steps in per_decision.items():
        assert steps <= 12 * math.log2(n), per_decision
    # From 16 to 65,536 endpoints (4096×) the cost must grow far less than linearly.
    assert per_decision[65536] < 6 * per_decision[16], per_decision
