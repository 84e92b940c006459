"""How many leading blocks of one prompt each endpoint holds, per tier (exclusive counts): what a KV locator answers
and a demand keeps for its retries."""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TierBlocks:
    npu: int = 0  # in the engine's own KV cache
    cpu: int = 0  # after those, in its CPU tier or the shared pool
    disk: int = 0  # after those, on a disk tier


NO_BLOCKS = TierBlocks()


@dataclass(frozen=True, slots=True)
class KvMatches:
    """`by_key` per endpoint key; `default` for every endpoint not in it (what the pool holds for all)."""

    by_key: dict[str, TierBlocks]
    default: TierBlocks = NO_BLOCKS
