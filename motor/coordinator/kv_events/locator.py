"""Where a prompt's blocks are, per endpoint and tier, from the KV index and what the pool said of the prompt.

Exclusive counts as pyMotor's conductor gives them: `npu` = the leading blocks in the engine's own cache; `cpu` =
how far the prompt continues from there in the engine's CPU tier or the shared pool (walking from the root too,
keeping the farther end); `disk` likewise on a disk tier. Endpoints that hold nothing of their own share the
`default` match: the pool's leading blocks, which every prefill engine can load.
"""

from motor.coordinator.scheduling.demand import Demand
from motor.coordinator.scheduling.kv_matches import NO_BLOCKS, KvMatches, TierBlocks
from motor.kv.block_hashes import BlockHasher
from motor.kv.index import KvIndex


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
        hashes = self.block_hashes(demand)
        if hashes is None:
            return None
        if not hashes:
            return KvMatches({})
        index = self.index
        pool = min(demand.pool_blocks or 0, len(hashes))
        device = index.longest_prefixes(hashes, "device")
        cpu_root = index.longest_prefixes(hashes, "cpu")
        disk_root = index.longest_prefixes(hashes, "disk")
        by_key: dict[str, TierBlocks] = {}
        for key in device.keys() | cpu_root.keys() | disk_root.keys():
            npu_end = device.get(key, 0)
            cpu_end = max(npu_end, pool, cpu_root.get(key, 0))
            cpu_end = index.continue_prefix(key, hashes, cpu_end, "cpu")
            disk_end = max(cpu_end, disk_root.get(key, 0))
            disk_end = index.continue_prefix(key, hashes, disk_end, "disk")
            by_key[key] = TierBlocks(npu_end, cpu_end - npu_end, disk_end - cpu_end)
        return KvMatches(by_key, TierBlocks(cpu=pool) if pool else NO_BLOCKS)
