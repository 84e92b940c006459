"""kv_cache_affinity: pyMotor's scoring rule on hand-worked cases, the fallbacks to load, the locator's tier counts
from a real index, and the compiled decider giving exactly the generic decider's answers."""

import random

import pytest

from motor.coordinator.kv_events.locator import KvLocatorFromIndex
from motor.coordinator.scheduling.compiled import GenericDecider, KvAffinityDecider, compile_profile
from motor.coordinator.scheduling.demand import Demand
from motor.coordinator.scheduling.kv_affinity import KvAffinityScorer, KvAffinityWeights
from motor.coordinator.scheduling.kv_matches import NO_BLOCKS, KvGroup, KvMatches, TierBlocks
from motor.coordinator.scheduling.load import EndpointLoad, Pool
from motor.coordinator.scheduling.profiles import PolicyOptions, build_profile
from motor.coordinator.scheduling.scheduler import Scheduler
from motor.kv.block_hashes import BlockHasher
from motor.kv.events import BlockStored, EventBatch
from motor.kv.index import KvIndex
from tests.unit.test_coordinator_scheduling import make_target

BLOCK = 16


class FixedLocator:
    """Answers what a test says each endpoint holds (the decider tests need arbitrary matches)."""

    block_size = BLOCK

    def __init__(self, matches: KvMatches | None) -> None:
        self.matches = matches

    def locate(self, demand: Demand) -> KvMatches | None:
        return self.matches


def matches_of(by_key: dict[str, TierBlocks], default: TierBlocks = NO_BLOCKS) -> KvMatches:
    """A locator's answer with one group per endpoint key."""
    keys = list(by_key)
    groups = tuple(KvGroup(blocks, 1 << slot) for slot, blocks in enumerate(by_key.values()))
    return KvMatches(groups, {key: slot for slot, key in enumerate(keys)}, keys, default)


def pool_of(loads: list[float]) -> list[EndpointLoad]:
    result = [EndpointLoad(make_target(i)) for i in range(len(loads))]
    for endpoint, load in zip(result, loads, strict=True):
        endpoint.tokens = load
    Pool(result)
    return result


def demand(tokens: int = 10 * BLOCK) -> Demand:
    return Demand(prompt_tokens=tokens, max_new_tokens=8, prompt_token_ids=list(range(tokens)))


def test_unified_cost_is_pymotors_formula() -> None:
    weights = KvAffinityWeights(
        w_npu=1.0, w_cpu=0.5, overlap_credit=0.8, prefill_load_scale=2.0, load_weight=0.5
    )
    scorer = KvAffinityScorer(FixedLocator(None), weights)
    endpoint = pool_of([100.0])[0]
    isl = 10 * BLOCK
    matched = scorer.matched_tokens(TierBlocks(npu=3, cpu=2), isl)
    assert matched == round((3 * 1.0 + 2 * 0.5) * BLOCK) == 64
    assert scorer.cost(endpoint, matched, isl) == pytest.approx(2.0 * (160 - 0.8 * 64) + 0.5 * 100)
    assert scorer.matched_tokens(TierBlocks(npu=50), isl) == isl  # never more than the prompt


def test_unified_trades_cached_blocks_against_load() -> None:
    # e0 holds 8 of 10 blocks but carries 100 tokens; e1 is idle and holds nothing: 160-128+100 < 160 + 0
    endpoints = pool_of([100.0, 0.0])
    matches = matches_of({endpoints[0].key: TierBlocks(npu=8)})
    scorer = KvAffinityScorer(FixedLocator(matches), KvAffinityWeights())
    scores = scorer.score(endpoints, demand())
    assert scores[0] > scores[1]
    endpoints[0].tokens = 200.0  # now 160 - 128 + 200 > 160
    scores = scorer.score(endpoints, Demand(prompt_tokens=160, max_new_tokens=8, prompt_token_ids=[0] * 160))
    assert scores[0] < scores[1]


def test_load_gated_keeps_the_least_loaded_then_the_longest_match() -> None:
    endpoints = pool_of([0.0, 10.0, 500.0])
    matches = matches_of({endpoints[1].key: TierBlocks(npu=2), endpoints[2].key: TierBlocks(npu=9)})
    weights = KvAffinityWeights(mode="load_gated")
    options = PolicyOptions(kv_locator=FixedLocator(matches), kv_weights=weights)
    profile = build_profile("kv_cache_affinity", "prefill", options)
    decider = compile_profile(profile, Pool(endpoints))
    assert isinstance(decider, KvAffinityDecider)
    # e2 holds the most but is outside the two least loaded: e1 wins on its match
    assert decider.decide(demand(), frozenset()) is endpoints[1]
    assert GenericDecider(profile, Pool(endpoints)).decide(demand(), frozenset()) is endpoints[1]


def test_no_token_ids_or_too_little_matched_goes_by_load() -> None:
    endpoints = pool_of([50.0, 5.0])
    matches = matches_of({endpoints[0].key: TierBlocks(npu=1)})
    for weights, request in (
        (KvAffinityWeights(), Demand(prompt_tokens=160, max_new_tokens=8, prompt_text="no ids")),
        (KvAffinityWeights(hit_rate_threshold=0.5), demand()),
    ):
        locator = KvLocatorFromIndex(KvIndex(BLOCK), BlockHasher(BLOCK))
        scorer = KvAffinityScorer(
            locator if request.prompt_token_ids is None else FixedLocator(matches), weights
        )
        assert scorer.matches(request) is None
        scores = scorer.score(endpoints, request)
        assert scores[1] > scores[0]  # the lighter endpoint, as load_balance would


def test_the_chosen_endpoint_is_charged_only_what_it_must_compute() -> None:
    scheduler = Scheduler("kv_cache_affinity", kv_locator=FixedLocator(None))
    targets = [make_target(i) for i in range(2)]
    matches = matches_of({targets[1].key: TierBlocks(npu=6)})
    scheduler.options.kv_locator.matches = matches  # type: ignore[union-attr]
    scheduler.set_targets(targets)
    request = demand()
    assert scheduler.pick("prefill", request) is targets[1]
    assert request.pool_hit_tokens == 6 * BLOCK
    assert request.prefill_tokens == 4 * BLOCK


def stored(hashes: list[int], medium: str = "GPU") -> BlockStored:
    return BlockStored(block_hashes=hashes, block_size=BLOCK, medium=medium)  # type: ignore[call-arg]


def test_locator_counts_tiers_exclusively_and_the_pool_for_everyone() -> None:
    hasher = BlockHasher(BLOCK)
    index = KvIndex(BLOCK)
    ids = list(range(10 * BLOCK))
    hashes = hasher.event_hashes(ids)
    index.apply("a", EventBatch(0, 0.0, [stored(hashes[:3]), stored(hashes[3:6], "CPU")], None, 0))
    index.apply("b", EventBatch(0, 0.0, [stored(hashes[:1])], None, 0))
    locator = KvLocatorFromIndex(index, hasher)
    request = Demand(prompt_tokens=len(ids), max_new_tokens=1, prompt_token_ids=ids, pool_blocks=4)
    found = locator.locate(request)
    assert found is not None
    assert found.blocks_of("a") == TierBlocks(npu=3, cpu=3)  # its CPU tier continues past the pool's 4
    assert found.blocks_of("b") == TierBlocks(npu=1, cpu=3)  # its own block, then the pool's
    assert found.default == TierBlocks(cpu=4)  # any other engine loads the pool's 4 blocks


@pytest.mark.parametrize("mode", ["unified", "load_gated"])
def test_compiled_decider_matches_the_generic_one(mode: str) -> None:
    rng = random.Random(7)
    for _ in range(300):
        n = rng.randint(1, 12)
        endpoints = pool_of([float(rng.choice([0, 10, 50, 200, 1000])) for _ in range(n)])
        for endpoint in endpoints:
            endpoint.last_pick = rng.randint(-20, 20)
        named = rng.sample(endpoints, rng.randint(0, n))
        matches = matches_of(
            {e.key: TierBlocks(npu=rng.randint(0, 10), cpu=rng.randint(0, 3)) for e in named},
            TierBlocks(cpu=rng.randint(0, 1)),
        )
        weights = KvAffinityWeights(
            mode=mode, load_weight=rng.choice([0.1, 1.0, 3.0]), w_cpu=rng.choice([0.0, 1.0])
        )
        options = PolicyOptions(kv_locator=FixedLocator(matches), kv_weights=weights)
        profile = build_profile("kv_cache_affinity", "prefill", options)
        pool = Pool(endpoints)
        fast = compile_profile(profile, pool)
        assert isinstance(fast, KvAffinityDecider)
        exclude = frozenset(e.instance_id for e in rng.sample(endpoints, rng.randint(0, n - 1)))
        request, twin = demand(), demand()
        assert fast.decide(request, exclude) is GenericDecider(profile, pool).decide(twin, exclude)


def test_compiled_decider_matches_the_generic_one_on_a_real_index_as_loads_move() -> None:
    # 40 endpoints, prefixes held by up to 30 of them (groups far larger than a few members), their own tails,
    # loads changing through the heap as the scheduler changes them, instances leaving and coming back
    rng = random.Random(11)
    index = KvIndex(BLOCK)
    endpoints = pool_of([float(rng.choice([0, 0, 5, 40, 300, 2000])) for _ in range(40)])
    prefixes = [[rng.getrandbits(64) for _ in range(rng.randint(2, 12))] for _ in range(4)]
    tails: dict[str, list[list[int]]] = {}
    sequence = dict.fromkeys((e.key for e in endpoints), 0)

    def store(key: str, blocks: list[int], parent: int | None) -> None:
        event = BlockStored(block_hashes=blocks, block_size=BLOCK, parent_block_hash=parent)  # type: ignore[call-arg]
        index.apply(key, EventBatch(sequence[key], 0.0, [event], None, 0))
        sequence[key] += 1

    def fill(endpoint: EndpointLoad) -> None:
        for prefix in rng.sample(prefixes, rng.randint(0, 3)):
            store(endpoint.key, prefix, None)
            tail = [rng.getrandbits(64) for _ in range(rng.randint(1, 4))]
            store(endpoint.key, tail, prefix[-1])
            tails.setdefault(endpoint.key, []).append(prefix + tail)

    for endpoint in endpoints:
        fill(endpoint)
    options = PolicyOptions(
        kv_locator=KvLocatorFromIndex(index, BlockHasher(BLOCK)), kv_weights=KvAffinityWeights()
    )
    profile = build_profile("kv_cache_affinity", "prefill", options)
    pool = Pool(endpoints)
    fast = compile_profile(profile, pool)
    assert isinstance(fast, KvAffinityDecider)
    generic = GenericDecider(profile, pool)
    for step in range(400):
        roll = rng.random()
        if roll < 0.5:
            prompt = rng.choice(rng.choice(list(tails.values())))[: rng.randint(1, 16)]
        elif roll < 0.9:
            prompt = [*rng.choice(prefixes), rng.getrandbits(64)]
        else:
            prompt = [rng.getrandbits(64)]
        exclude = frozenset(e.instance_id for e in rng.sample(endpoints, rng.choice([0, 0, 1, 5])))
        request, twin = demand(len(prompt) * BLOCK), demand(len(prompt) * BLOCK)
        request.kv_hashes, twin.kv_hashes = prompt, list(prompt)
        chosen = fast.decide(request, exclude)
        assert chosen is generic.decide(twin, exclude), step
        for endpoint in rng.sample(endpoints, 3):  # loads move as legs come and go, the heap told each time
            endpoint.tokens = max(0.0, endpoint.tokens + rng.choice([-500, -50, 50, 500, 3000]))
            fast.heap.update(endpoint)  # type: ignore[union-attr]
        if step % 50 == 49:  # two instances leave the index and come back the other way round: slots swap
            gone = rng.sample(endpoints, 2)
            for endpoint in gone:
                index.remove_instance(endpoint.key)
                sequence[endpoint.key] = 0
                tails.pop(endpoint.key, None)
            for endpoint in reversed(gone):
                while endpoint.key not in tails:
                    fill(endpoint)
