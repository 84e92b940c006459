"""scheduler_type kv_cache_affinity: place a prefill (or union) leg where the prompt's KV already is.

A `KvLocator` says, for a prompt, how many of its leading blocks each endpoint holds per tier — exclusive counts,
the engine's own cache first (`npu`), then what continues it in a CPU tier or the shared pool (`cpu`), then a
disk tier (`disk`) — from the engines' KV events and the pool's own answer (`motor.coordinator.kv_events`).
Endpoints the locator does not name hold only what every endpoint can read (the pool's blocks: `default`).

Scoring is pyMotor's `kv_affinity`:
- matched = min(isl, round((npu·w_npu + cpu·w_cpu + disk·w_disk) · block_size)) tokens;
- unified: cost = prefill_load_scale · max(0, isl − overlap_credit · matched) + load_weight · load; lowest wins;
- load_gated: the `load_gate_topn` least loaded endpoints (0 means 2), then the longest match, ties to the lower
  load.
`load` is motor's in-flight load of the endpoint (tokens still to compute + KV tokens held). With no token ids,
a locator that cannot answer, or a best match at or below `hit_rate_threshold` of the prompt, the leg is placed by
load alone (load_balance). The chosen endpoint is charged `isl − matched` prompt tokens to compute.

`motor.coordinator.scheduling.compiled.KvAffinityDecider` gives this profile's answer without scoring every
endpoint.
"""

from dataclasses import dataclass
from typing import Protocol

from motor.coordinator.scheduling.demand import Demand
from motor.coordinator.scheduling.kv_matches import KvMatches, KvPrediction, TierBlocks
from motor.coordinator.scheduling.load import EndpointLoad
from motor.coordinator.scheduling.plugins import Exclusions, Filter, PickObserver, Scorer

DEFAULT_GATE_TOPN = 2
COST_HALF_SCORE_TOKENS = 1024.0


class KvLocator(Protocol):
    block_size: int

    def locate(self, demand: Demand) -> KvMatches | None:
        """Where the prompt's blocks are; None when the locator cannot say (then the leg goes by load)."""


@dataclass(frozen=True)
class KvAffinityWeights:
    mode: str = "unified"
    load_weight: float = 1.0
    overlap_credit: float = 1.0
    prefill_load_scale: float = 1.0
    load_gate_topn: int = 0
    w_npu: float = 1.0
    w_cpu: float = 1.0
    w_disk: float = 0.0
    hit_rate_threshold: float = 0.0

    @property
    def gate_topn(self) -> int:
        return self.load_gate_topn or DEFAULT_GATE_TOPN


class KvAffinityScorer(Scorer, PickObserver):
    """Scores `half / (half + cost)` (unified) or `(matched + load score) / (isl + 1)` (load_gated): both order
    endpoints exactly as pyMotor's rule does, within 0–1."""

    name = "kv_affinity"

    def __init__(self, locator: KvLocator, weights: KvAffinityWeights) -> None:
        self.locator = locator
        self.weights = weights

    def matches(self, demand: Demand) -> KvMatches | None:
        """The locator's answer, or None when the leg goes by load (no answer, or too little matched); asked once
        per pick (`Scheduler.pick` clears it)."""
        if demand.kv_matches is None:
            found = self.locator.locate(demand)
            demand.kv_matches = found if found is not None and self._worth_it(found, demand) else False
        return demand.kv_matches or None

    def matched_tokens(self, blocks: TierBlocks, isl: int) -> int:
        w = self.weights
        weighted = blocks.npu * w.w_npu + blocks.cpu * w.w_cpu + blocks.disk * w.w_disk
        return min(isl, round(weighted * self.locator.block_size))

    def cost(self, endpoint: EndpointLoad, matched: int, isl: int) -> float:
        w = self.weights
        return (
            w.prefill_load_scale * max(0.0, isl - w.overlap_credit * matched) + w.load_weight * endpoint.load
        )

    def score(self, candidates: list[EndpointLoad], demand: Demand) -> list[float]:
        matches = self.matches(demand)
        if matches is None:
            return [_load_score(endpoint) for endpoint in candidates]
        isl = demand.prompt_tokens
        if self.weights.mode == "load_gated":
            return [
                (self.matched_tokens(matches.blocks_of(e.key), isl) + _load_score(e)) / (isl + 1)
                for e in candidates
            ]
        half = COST_HALF_SCORE_TOKENS
        return [
            half / (half + self.cost(e, self.matched_tokens(matches.blocks_of(e.key), isl), isl))
            for e in candidates
        ]

    def picked(self, endpoint: EndpointLoad, demand: Demand) -> None:
        matches = self.matches(demand)
        if matches is None:
            demand.kv_prediction = None
            return
        blocks = matches.blocks_of(endpoint.key)
        matched = self.matched_tokens(blocks, demand.prompt_tokens)
        demand.kv_prediction = KvPrediction(matched, blocks, self.locator.block_size)
        if demand.pool_hit_tokens is None:  # a retry keeps the first figure
            demand.pool_hit_tokens = matched

    def _worth_it(self, matches: KvMatches, demand: Demand) -> bool:
        threshold = self.weights.hit_rate_threshold
        if threshold <= 0:
            return True
        isl = max(1, demand.prompt_tokens)
        best = max(
            (self.matched_tokens(b, isl) for b in (*(g.blocks for g in matches.groups), matches.default)),
            default=0,
        )
        return best / isl > threshold


def _load_score(endpoint: EndpointLoad) -> float:
    return COST_HALF_SCORE_TOKENS / (COST_HALF_SCORE_TOKENS + endpoint.load)


class LeastLoadedFilter(Filter):
    """Keeps the `n` least loaded candidates (ties to the one picked least recently): load_gated's gate."""

    name = "least_loaded"

    def __init__(self, n: int) -> None:
        self.n = n

    def apply(
        self, candidates: list[EndpointLoad], demand: Demand, exclude: Exclusions
    ) -> list[EndpointLoad]:
        if len(candidates) <= self.n:
            return candidates
        return sorted(candidates, key=lambda e: (e.load, e.last_pick))[: self.n]
