"""What the shared KV pool probably holds of a prompt, as the coordinator can know it without asking the pool.

Every prompt a prefill instance was given has its blocks written to the pool by that engine, and every prefill
instance reads the same pool: so the leading blocks of a new prompt that match a prompt placed before are
expected pool hits, whichever instance computed them. The memory is an LRU index of block hashes, as bounded
as prefix affinity's (`prefix.py`); entries the pool evicted meanwhile make the estimate optimistic.
"""

from motor.coordinator.scheduling.demand import Demand
from motor.coordinator.scheduling.load import EndpointLoad
from motor.coordinator.scheduling.plugins import PickObserver
from motor.coordinator.scheduling.prefix import PrefixIndex

_POOL = "pool"  # the one owner: the pool, not an instance


class PoolHits(PickObserver):
    """Sets `demand.pool_hit_tokens` when a prefill leg is placed (before remembering the prompt itself)."""

    def __init__(self, block_size: int, index: PrefixIndex | None = None) -> None:
        self.block_size = block_size
        self.index = index or PrefixIndex()

    def expected_hit_tokens(self, demand: Demand) -> int:
        hashes = demand.block_hashes(self.block_size)
        depth = self.index.deepest(hashes)[0] if hashes else 0
        return min(depth * self.block_size, demand.prompt_tokens)

    def picked(self, endpoint: EndpointLoad, demand: Demand) -> None:
        if demand.pool_hit_tokens is None:  # a retry keeps the first estimate
            demand.pool_hit_tokens = self.expected_hit_tokens(demand)
        hashes = demand.block_hashes(self.block_size)
        if hashes:
            self.index.remember(hashes, _POOL)
