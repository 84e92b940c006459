"""Prompt block hashes and the per-process memory of which prefill instance saw which prefix.

Without a tokenizer the coordinator cuts text into blocks of `block_size * CHARS_PER_TOKEN` characters (token
id prompts into blocks of `block_size` ids). Hashes are chained, so equal hashes at depth k mean equal prompts
up to block k — the same property vLLM's prefix cache keys have. Only full blocks are hashed.
"""

from collections import OrderedDict

CHARS_PER_TOKEN = 4
DEFAULT_CAPACITY_BLOCKS = 200_000
OWNERS_PER_BLOCK = 4


def text_block_hashes(text: str, block_size: int) -> list[int]:
    width = block_size * CHARS_PER_TOKEN
    hashes = []
    previous = 0
    for start in range(0, len(text) - width + 1, width):
        previous = hash((previous, text[start : start + width]))
        hashes.append(previous)
    return hashes


def token_block_hashes(token_ids: list[int], block_size: int) -> list[int]:
    hashes = []
    previous = 0
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        previous = hash((previous, tuple(token_ids[start : start + block_size])))
        hashes.append(previous)
    return hashes


class PrefixIndex:
    """LRU map block hash → the targets (most recent last) that served a prompt containing that block."""

    def __init__(self, capacity_blocks: int = DEFAULT_CAPACITY_BLOCKS) -> None:
        self.capacity_blocks = capacity_blocks
        self._owners: OrderedDict[int, list[str]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._owners)

    def deepest(self, hashes: list[int]) -> tuple[int, list[str]]:
        """(number of leading blocks known, owners of the deepest known block)."""
        owners: list[str] = []
        depth = 0
        for block_hash in hashes:
            found = self._owners.get(block_hash)
            if found is None:
                break
            depth += 1
            owners = found
        return depth, owners

    def remember(self, hashes: list[int], target_key: str) -> None:
        owners_map = self._owners
        for block_hash in hashes:
            owners = owners_map.get(block_hash)
            if owners is None:
                owners_map[block_hash] = [target_key]
                continue
            owners_map.move_to_end(block_hash)
            if owners and owners[-1] == target_key:
                continue
            if target_key in owners:
                owners.remove(target_key)
            owners.append(target_key)
            if len(owners) > OWNERS_PER_BLOCK:
                del owners[0]
        while len(owners_map) > self.capacity_blocks:
            owners_map.popitem(last=False)
