"""Where a prompt's blocks are, per endpoint and tier, from the KV index and what the pool said of the prompt.

Exclusive counts as pyMotor's conductor gives them: `npu` = the leading blocks in the engine's own cache; `cpu` =
how far the prompt continues from there (or from the pool's leading blocks, when they reach farther) in the
engine's CPU tier or the shared pool; `disk` likewise on a disk tier. Endpoints that hold nothing of their own
share the `default` match: the pool's leading blocks, which every prefill engine can load.

The index's walk (`KvIndex.runs`) splits the endpoints into groups that hold the same: first by their own cache,
then each group by its CPU tier, then by disk, so the answer has one group per distinct count, not one entry per
endpoint. Only blocks an engine can hit count: it computes at least the prompt's last token, so of a prompt of
`isl` tokens at most `(isl - 1) // block_size` blocks.
"""

from motor.coordinator.scheduling.demand import Demand
from motor.coordinator.scheduling.kv_matches import NO_BLOCKS, KvGroup, KvMatches, TierBlocks
from motor.kv.block_hashes import BlockHasher
from motor.kv.index import EVERY_INSTANCE, KvIndex


class KvLocatorFromIndex:
    def __init__(self, index: KvIndex, hasher: BlockHasher) -> None:
        if index.block_size != hasher.block_size:
            raise ValueError(f"index block size {index.block_size} != hasher block size {hasher.block_size}")
        self.index = index
        self.hasher = hasher
        self.block_size = hasher.block_size

    def block_hashes(self, demand: Demand) -> list[int] | None:
        if demand.kv_hashes is None and demand.prompt_token_ids is not None:
            demand.kv_hashes = self.hasher.event_hashes(demand.prompt_token_ids)
        return demand.kv_hashes

    def locate(self, demand: Demand) -> KvMatches | None:
        found = self.block_hashes(demand)
        if found is None:
            return None
        # an engine computes at least the prompt's last token: it finds at most (isl - 1) // block_size blocks
        usable = max(0, (demand.prompt_tokens - 1) // self.block_size)
        hashes = tuple(found[:usable])  # a tuple: the index's walks compare it with its runs' tuples
        index = self.index
        pool = min(demand.pool_blocks or 0, len(hashes))
        default = TierBlocks(cpu=pool) if pool else NO_BLOCKS
        groups: list[KvGroup] = []
        for npu_end, own in index.runs(hashes, "device", 0, EVERY_INSTANCE):
            for cpu_end, offloaded in index.runs(hashes, "cpu", max(npu_end, pool), own):
                for disk_end, members in index.runs(hashes, "disk", cpu_end, offloaded):
                    blocks = TierBlocks(npu_end, cpu_end - npu_end, disk_end - cpu_end)
                    if members < 0:  # everyone the index names nowhere here: what the pool gives all
                        default = blocks
                    else:
                        groups.append(KvGroup(blocks, members))
        return KvMatches(tuple(groups), index.slots, index.names, default, index.slot_version)
