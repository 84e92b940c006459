"""The engine's local prefix cache: KV blocks it computed or fetched, by block hash, least recently used out first."""

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class HeldBlock:
    kv: bytes
    digest: int


class PrefixCache:
    def __init__(self, capacity_blocks: int) -> None:
        self._capacity = capacity_blocks
        self._blocks: OrderedDict[bytes, HeldBlock] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    @property
    def capacity(self) -> int:
        return self._capacity

    def __contains__(self, block_hash: bytes) -> bool:
        return block_hash in self._blocks

    def longest_prefix(self, hashes: Sequence[bytes]) -> list[HeldBlock]:
        found = []
        for block_hash in hashes:
            block = self._blocks.get(block_hash)
            if block is None:
                break
            self._blocks.move_to_end(block_hash)
            found.append(block)
        return found

    def insert(self, block_hash: bytes, block: HeldBlock) -> list[bytes]:
        """Keep a block (most recently used); returns the hashes of the blocks evicted to make room."""
        if self._capacity <= 0:
            return []
        self._blocks[block_hash] = block
        self._blocks.move_to_end(block_hash)
        evicted = []
        while len(self._blocks) > self._capacity:
            evicted.append(self._blocks.popitem(last=False)[0])
        return evicted
