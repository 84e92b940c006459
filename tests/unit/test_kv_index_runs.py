"""The KV index's runs (motor/kv/index.py) against a plain model of what each instance holds: after any sequence of
stored chain segments, removed blocks (in any order), cleared caches, restarts and removed instances, a prompt's
walk puts every instance in the group of exactly the leading blocks it holds, per tier, from any start."""

import random

import pytest

from motor.kv.events import AllBlocksCleared, BlockRemoved, BlockStored, EventBatch
from motor.kv.index import EVERY_INSTANCE, TIERS, KvIndex, slots_of

BLOCK = 4
INSTANCES = [f"p{i}" for i in range(6)]
MEDIUM = {"device": "GPU", "cpu": "CPU", "disk": "STORAGE"}


def chain(path: tuple[int, ...]) -> list[int]:
    """The block hashes of a path of choices (a prefix tree with a few branches at every depth)."""
    return [hash(("block", path[: depth + 1])) & ((1 << 64) - 1) for depth in range(len(path))]


def random_path(rng: random.Random) -> tuple[int, ...]:
    return tuple(rng.choice((0, 0, 0, 1, 2)) for _ in range(rng.randint(1, 14)))


class Model:
    """What each instance holds, per tier, as plain sets."""

    def __init__(self) -> None:
        self.held: dict[str, dict[str, set[int]]] = {}

    def depth(self, instance: str, tier: str, hashes: list[int], start: int) -> int:
        blocks = self.held.get(instance, {}).get(tier, set())
        end = start
        while end < len(hashes) and hashes[end] in blocks:
            end += 1
        return end - start


def scenario(seed: int) -> tuple[KvIndex, Model, random.Random]:
    rng = random.Random(seed)
    index, model = KvIndex(BLOCK), Model()
    sequence = dict.fromkeys(INSTANCES, 0)

    def send(instance: str, *events: object) -> None:
        index.apply(instance, EventBatch(sequence[instance], 0.0, list(events), None, 0))  # type: ignore[arg-type]
        sequence[instance] += 1

    for _ in range(rng.randint(1, 80)):
        instance = rng.choice(INSTANCES)
        tier = rng.choice(("device", "device", "cpu", "disk"))
        held = model.held.setdefault(instance, {t: set() for t in TIERS})
        roll = rng.random()
        if roll < 0.6:
            hashes = chain(random_path(rng))
            start = rng.randrange(len(hashes))
            end = rng.randint(start + 1, len(hashes))
            parent = hashes[start - 1] if start else None
            stored = BlockStored(hashes[start:end], BLOCK, MEDIUM[tier], parent)  # type: ignore[arg-type]
            send(instance, stored)
            held[tier].update(hashes[start:end])
        elif roll < 0.85:
            if rng.random() < 0.5:  # a stretch of a chain, in order or tail first (as vLLM evicts)
                hashes = chain(random_path(rng))
                start = rng.randrange(len(hashes))
                removed = hashes[start : rng.randint(start + 1, len(hashes))]
                if rng.random() < 0.5:
                    removed.reverse()
            else:  # any blocks, held or not, in any order
                blocks = sorted(held[tier] | set(chain(random_path(rng))), key=lambda _: rng.random())
                removed = blocks[: rng.randint(0, len(blocks))]
            send(instance, BlockRemoved(removed, MEDIUM[tier]))  # type: ignore[arg-type]
            held[tier].difference_update(removed)
        elif roll < 0.92:
            send(instance, AllBlocksCleared())
            held["device"].clear()
        elif roll < 0.96:
            index.remove_instance(instance)
            model.held.pop(instance)
            sequence[instance] = 0
        else:  # the engine restarted: its next batch is sequence 0 again
            sequence[instance] = 0
            send(instance)
            model.held[instance] = {t: set() for t in TIERS}
    return index, model, rng


@pytest.mark.parametrize("seed", range(150))
def test_runs_put_every_instance_where_the_plain_model_does(seed: int) -> None:
    index, model, rng = scenario(seed)
    for tier in TIERS:
        assert index.block_count(tier) == len(set().union(*(held[tier] for held in model.held.values())))
        for instance in model.held:
            assert index.held_blocks(instance, tier) == len(model.held[instance][tier])
    for _ in range(30):
        hashes = chain(random_path(rng))
        tier = rng.choice(TIERS)
        start = rng.randrange(len(hashes) + 1)
        members = EVERY_INSTANCE
        if rng.random() < 0.5:
            members = sum(1 << slot for slot in rng.sample(range(len(INSTANCES)), rng.randint(0, 3)))
        found = index.runs(hashes, tier, start, members)
        ends = [end for end, _ in found]
        assert ends == sorted(set(ends)) and all(start <= end <= len(hashes) for end in ends)
        assert all(mask for _, mask in found)
        for instance, slot in index.slots.items():
            groups = [end for end, mask in found if mask >> slot & 1]
            if not members >> slot & 1:
                assert groups == []
                continue
            assert groups == [start + model.depth(instance, tier, hashes, start)], (instance, tier, found)
        expected = {i: model.depth(i, tier, hashes, 0) for i in model.held}
        assert index.longest_prefixes(hashes, tier) == {i: d for i, d in expected.items() if d}


def test_a_prefix_held_everywhere_is_one_group_and_one_run() -> None:
    index = KvIndex(BLOCK)
    prefix = chain((0,) * 12)
    for n, instance in enumerate(INSTANCES):
        index.apply(instance, EventBatch(0, 0.0, [BlockStored(prefix, BLOCK, "GPU")], None, 0))  # type: ignore[arg-type]
        tail = chain((0,) * 12 + (n + 1,) * 3)[12:]
        index.apply(instance, EventBatch(1, 0.0, [BlockStored(tail, BLOCK, "GPU", prefix[-1])], None, 0))  # type: ignore[arg-type]
    assert index.run_count() == 1 + len(INSTANCES)
    found = index.runs(chain((0,) * 12 + (3,) * 5), "device", 0, EVERY_INSTANCE)
    everyone = sum(1 << index.slots[i] for i in INSTANCES)
    assert [(end, list(slots_of(mask))) for end, mask in found if mask > 0] == [
        (12, list(slots_of(everyone & ~(1 << index.slots["p2"])))),
        (15, [index.slots["p2"]]),
    ]
