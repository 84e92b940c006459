"""Scorers: how well each candidate suits a leg, 0–1, combined by the profile's weights."""

from motor.coordinator.scheduling.demand import Demand
from motor.coordinator.scheduling.load import EndpointLoad, Pool
from motor.coordinator.scheduling.plugins import PickObserver, Scorer
from motor.coordinator.scheduling.prefix import PrefixIndex

LOAD_HALF_SCORE_TOKENS = 1024.0


class LoadScorer(Scorer):
    """Less in-flight load scores higher: `half / (half + load)`, so an idle endpoint scores 1 and one holding
    `half` tokens (tokens still to compute + KV tokens held) 0.5. Strictly decreasing in the load, so on its
    own it ranks exactly by load (what the heap does)."""

    name = "load"

    def __init__(self, half: float = LOAD_HALF_SCORE_TOKENS) -> None:
        self.half = half

    def score(self, candidates: list[EndpointLoad], demand: Demand) -> list[float]:
        half = self.half
        return [half / (half + endpoint.tokens + endpoint.kv) for endpoint in candidates]


class PrefixAffinityScorer(Scorer, PickObserver):
    """1 for the endpoints that most recently served the longest known prefix of the prompt (the owners of its
    deepest block in the prefix index), 0 for the rest; remembers the chosen endpoint for the prompt's blocks.

    Without a tokenizer, prompts are cut into blocks of `block_size` tokens (see `prefix.py`)."""

    name = "prefix_affinity"
    sparse = True
    binary = True

    def __init__(self, index: PrefixIndex, block_size: int) -> None:
        self.index = index
        self.block_size = block_size

    def _owners(self, demand: Demand) -> list[str]:
        hashes = demand.block_hashes(self.block_size)
        return self.index.deepest(hashes)[1] if hashes else []

    def score(self, candidates: list[EndpointLoad], demand: Demand) -> list[float]:
        owners = set(self._owners(demand))
        return [1.0 if endpoint.key in owners else 0.0 for endpoint in candidates]

    def sparse_scores(self, pool: Pool, demand: Demand) -> dict[EndpointLoad, float]:
        hashes = demand.block_hashes(self.block_size)
        if not hashes:
            return {}
        by_key = pool.by_key
        return {
            endpoint: 1.0
            for key in self.index.deepest(hashes)[1]
            if (endpoint := by_key.get(key)) is not None
        }

    def picked(self, endpoint: EndpointLoad, demand: Demand) -> None:
        hashes = demand.block_hashes(self.block_size)
        if hashes:
            self.index.remember(hashes, endpoint.key)


class QueuedPrefillScorer(Scorer):
    """Less compute queued scores higher: `half / (half + tokens still to compute)`. Under `pd_aware` a prefill
    leg counts only what the pool does not hold (`Demand.prefill_tokens`), so this ranks prefill instances by
    the compute they have left, whoever saw the prompt's prefix (the pool serves it to all of them)."""

    name = "queued_prefill"

    def __init__(self, half: float = LOAD_HALF_SCORE_TOKENS) -> None:
        self.half = half

    def score(self, candidates: list[EndpointLoad], demand: Demand) -> list[float]:
        half = self.half
        return [half / (half + endpoint.tokens) for endpoint in candidates]


class KvHeldScorer(Scorer):
    """Less KV held scores higher (`half / (half + KV tokens held)`): more headroom before the engine's KV
    blocks run out and it queues or preempts."""

    name = "kv_held"

    def __init__(self, half: float = 8 * LOAD_HALF_SCORE_TOKENS) -> None:
        self.half = half

    def score(self, candidates: list[EndpointLoad], demand: Demand) -> list[float]:
        half = self.half
        return [half / (half + endpoint.kv) for endpoint in candidates]


class BatchScorer(Scorer):
    """Fewer legs in flight scores higher (`half / (half + legs)`): a decode step takes longer the larger the
    batch, so a smaller batch means a shorter inter-token latency."""

    name = "batch"

    def __init__(self, half: float = 16.0) -> None:
        self.half = half

    def score(self, candidates: list[EndpointLoad], demand: Demand) -> list[float]:
        half = self.half
        return [half / (half + endpoint.in_flight) for endpoint in candidates]
