"""Scheduling: filter → score → pick for round_robin, load_balance and prefix_affinity, and its O(log n) cost."""

import math
import random

import pytest

from motor.coordinator.registry import InstanceRegistry, Target
from motor.coordinator.scheduling.heap import LoadHeap
from motor.coordinator.scheduling.prefix import PrefixIndex, text_block_hashes, token_block_hashes
from motor.coordinator.scheduling.scheduler import Demand, Scheduler
from motor.protocol.instances import Endpoint, Instance, InstanceEvent


def make_target(i: int, role: str = "prefill") -> Target:
    return Target(
        key=f"i{i}@h:{i}",
        instance_id=f"i{i}",
        role=role,  # type: ignore[arg-type]
        engine_id=f"e{i}",
        model_name="m",
        host="127.0.0.1",
        port=1000 + i,
        bootstrap_port=None,
    )


def scheduler_with(
    policy: str, n: int, role: str = "prefill", **kwargs: object
) -> tuple[Scheduler, list[Target]]:
    scheduler = Scheduler(policy, **kwargs)  # type: ignore[arg-type]
    targets = [make_target(i, role) for i in range(n)]
    scheduler.set_targets({role: targets})  # type: ignore[dict-item]
    return scheduler, targets


def demand(prompt: str = "", tokens: int = 100) -> Demand:
    return Demand(prompt_tokens=tokens, max_new_tokens=10, prompt_text=prompt)


def test_heap_orders_by_load_then_least_recent_pick_under_random_updates() -> None:
    rng = random.Random(7)
    targets = [make_target(i) for i in range(50)]
    heap = LoadHeap(targets)
    for step in range(2000):
        target = rng.choice(targets)
        if rng.random() < 0.1 and target in heap:
            heap.remove(target)
        elif target not in heap:
            heap.push(target)
        target.tokens = rng.randint(0, 20)
        target.last_pick = step
        heap.update(target)
        members = [t for t in targets if t in heap]
        best = min((t.load, t.last_pick) for t in members)
        top = heap.peek()
        assert (top.load, top.last_pick) == best


def test_smallest_excluding_skips_excluded_instances() -> None:
    targets = [make_target(i) for i in range(20)]
    for i, target in enumerate(targets):
        target.tokens = i
    heap = LoadHeap(targets)
    assert heap.smallest_excluding(set()) is targets[0]
    assert heap.smallest_excluding({"i0", "i1", "i2"}) is targets[3]
    assert heap.smallest_excluding({f"i{i}" for i in range(20)}) is None


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
    assert targets[0].load == 0 and targets[0].in_flight == 0
    assert scheduler.pick("prefill", demand()) is targets[0]


def test_allocation_releases_tokens_and_kv_separately_and_only_once() -> None:
    scheduler, targets = scheduler_with("load_balance", 2)
    allocation = scheduler.allocate(targets[0], 100, 40)
    assert (targets[0].tokens, targets[0].kv, targets[0].in_flight) == (100, 40, 1)
    allocation.release_tokens()
    assert (targets[0].tokens, targets[0].kv) == (0, 40)
    allocation.release_kv()
    allocation.release()
    allocation.release()
    assert (targets[0].tokens, targets[0].kv, targets[0].in_flight) == (0, 0, 0)


def test_prefix_affinity_returns_to_the_instance_that_saw_the_prefix() -> None:
    scheduler, targets = scheduler_with("prefix_affinity", 4, affinity_block_size=4)
    prompt = "system prompt shared by every request " * 20
    first = scheduler.pick("prefill", demand(prompt))
    for other in targets:
        if other is not first:
            other.tokens = 0
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
    assert spilled is not owner and spilled.load == 0


def test_prefix_affinity_applies_to_prefill_not_decode() -> None:
    scheduler = Scheduler("prefix_affinity", affinity_block_size=4)
    decodes = [make_target(i, "decode") for i in range(3)]
    scheduler.set_targets({"decode": decodes})  # type: ignore[dict-item]
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


def test_registry_targets_follow_add_del_set_and_keep_their_load() -> None:
    registry = InstanceRegistry()

    def instance(name: str, role: str = "prefill", status: str = "active") -> Instance:
        return Instance(
            id=name,
            role=role,  # type: ignore[arg-type]
            engine_id=f"engine-{name}",
            model_name="m",
            endpoints=[Endpoint(host="127.0.0.1", port=9000 + len(name))],
            status=status,  # type: ignore[arg-type]
        )

    registry.apply(InstanceEvent(event="add", instances=[instance("a"), instance("bb", "decode")]))
    target = registry.targets("prefill")[0]
    target.tokens = 42
    result = registry.apply(InstanceEvent(event="add", instances=[instance("ccc", status="initial")]))
    assert result.instance_count == 3 and result.version == 2
    assert registry.targets("prefill") == [target] and target.tokens == 42, (
        "initial instances are not routable"
    )
    registry.apply(InstanceEvent(event="del", instances=[instance("a")]))
    assert not registry.has_role("prefill") and registry.has_role("decode")
    registry.apply(InstanceEvent(event="set", instances=[instance("ccc")]))
    assert [t.instance_id for t in registry.targets("prefill")] == ["ccc"] and not registry.has_role("decode")
    assert dict(registry.role_states()) == {("prefill", "active"): 1}


def test_prefix_index_is_bounded() -> None:
    index = PrefixIndex(capacity_blocks=10)
    for i in range(5):
        index.remember(text_block_hashes(f"{i}" * 80, 2), f"t{i}")
    assert len(index) == 10


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
