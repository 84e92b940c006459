"""How many leading blocks of one prompt each endpoint holds, per tier (exclusive counts): what a KV locator
answers for one pick.

Endpoints that hold the same are one group, its members a bit mask over the locator's slots (motor.kv.index), so
that a prefix held by hundreds of endpoints stays one number: the compiled decider looks for the least loaded
member of each group, never at every member. `slots` and `keys` may be the index's live tables: an answer is
read within the pick that asked for it; `slot_version` says when the same `slots` gave bits out anew.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TierBlocks:
    npu: int = 0  # in the engine's own KV cache
    cpu: int = 0  # after those, in its CPU tier or the shared pool
    disk: int = 0  # after those, on a disk tier


NO_BLOCKS = TierBlocks()


@dataclass(frozen=True, slots=True)
class KvPrediction:
    """What kv_cache_affinity expected of the endpoint it picked: the prompt tokens its caches and the pool
    hold (as the scorer weighs them), from which tiers, in blocks of `block_size` tokens."""

    tokens: int
    blocks: TierBlocks
    block_size: int


@dataclass(frozen=True, slots=True)
class KvGroup:
    blocks: TierBlocks
    members: int  # bit i set: the endpoint in slot i holds `blocks`


@dataclass(frozen=True, slots=True)
class KvMatches:
    """`groups` of endpoints holding more than `default`, which every other endpoint holds (the pool's blocks)."""

    groups: tuple[KvGroup, ...]
    slots: Mapping[str, int]  # endpoint key -> its bit in the groups' masks
    keys: Sequence[str | None]  # bit -> endpoint key
    default: TierBlocks = NO_BLOCKS
    slot_version: int = 0  # changes whenever `slots` gives a bit to another key

    def blocks_of(self, key: str) -> TierBlocks:
        slot = self.slots.get(key)
        if slot is not None:
            for group in self.groups:
                if group.members >> slot & 1:
                    return group.blocks
        return self.default
