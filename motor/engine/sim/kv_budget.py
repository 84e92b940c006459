"""The capacity model's KV-block budget: how many of the engine's blocks the admitted sequences hold.

A sequence holds its prompt's shareable full blocks by hash (sequences with the same prefix share them, counted
once, as in vLLM's prefix caching) and private blocks for the rest of its prompt and its output. Blocks no
sequence holds are free; the local prefix cache may still remember their content (cached blocks are evictable,
so they do not count as used, as in vLLM's `kv_cache_usage_perc`).
"""

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(eq=False)
class BlockHolding:
    """The blocks one sequence holds."""

    shared: Sequence[bytes] = ()  # hashes of its shareable prompt blocks
    holds_shared: bool = False
    private: int = 0

    @property
    def total(self) -> int:
        return (len(self.shared) if self.holds_shared else 0) + self.private


class KvBlockBudget:
    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self._refs: dict[bytes, int] = {}
        self._private = 0

    @property
    def used(self) -> int:
        return len(self._refs) + self._private

    @property
    def free(self) -> int:
        return self.num_blocks - self.used

    def usage(self) -> float:
        return self.used / self.num_blocks if self.num_blocks > 0 else 0.0

    def grow_to(self, holding: BlockHolding, blocks: int) -> bool:
        """Make `holding` hold at least `blocks` blocks; False (and no change) when too few are free."""
        new_shared = 0 if holding.holds_shared else sum(1 for h in holding.shared if h not in self._refs)
        private = max(blocks - len(holding.shared), 0)
        new_private = max(private - holding.private, 0)
        if new_shared + new_private > self.free:
            return False
        if not holding.holds_shared:
            for block_hash in holding.shared:
                self._refs[block_hash] = self._refs.get(block_hash, 0) + 1
            holding.holds_shared = True
        holding.private += new_private
        self._private += new_private
        return True

    def release(self, holding: BlockHolding) -> None:
        if holding.holds_shared:
            for block_hash in holding.shared:
                refs = self._refs[block_hash] - 1
                if refs:
                    self._refs[block_hash] = refs
                else:
                    del self._refs[block_hash]
            holding.holds_shared = False
        self._private -= holding.private
        holding.private = 0
