"""Which instance holds which prefix-cache blocks, per tier, kept from the engines' KV events (pure).

Blocks are keyed by their 64-bit event hash (motor.kv.block_hashes). A tier is where a block lives: `device`
(the engine's own KV cache: vLLM's medium `GPU`, or none), `cpu` (`CPU`: an offload tier or the pool) or `disk`
(`STORAGE`). `longest_prefixes(hashes, tier)` answers how many leading blocks of a prompt each instance holds.

Each instance's events must arrive in sequence. `apply` takes a batch and says what it did with it:
- `APPLIED`: the next batch in order (or the first batch seen from that instance);
- `DUPLICATE`: already applied (a replay overlapping what arrived live): skipped;
- `RESTARTED`: the sequence went back to 0 — the engine restarted and its cache is empty: what was known of it
  is dropped, then the batch is applied;
- `GAP`: batches are missing: nothing is applied. The caller replays the missing ones (and applies this batch
  after them), or calls `resync`, which forgets the instance so that the next batch starts it afresh.
BlockStored events with another block size than the index's are ignored and counted: their hashes would never
match a prompt's.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum

from motor.kv.block_hashes import event_hash
from motor.kv.events import AllBlocksCleared, BlockRemoved, BlockStored, EventBatch

TIERS = ("device", "cpu", "disk")
TIER_OF_MEDIUM = {None: "device", "GPU": "device", "NPU": "device", "CPU": "cpu", "STORAGE": "disk"}


class Outcome(Enum):
    APPLIED = "applied"
    DUPLICATE = "duplicate"
    RESTARTED = "restarted"
    GAP = "gap"


@dataclass
class IndexStats:
    batches: int = 0
    blocks_stored: int = 0
    blocks_removed: int = 0
    wrong_block_size: int = 0
    unknown_medium: int = 0
    unknown_events: int = 0
    gaps: int = 0
    restarts: int = 0


def _key(block_hash: int | bytes) -> int:
    return event_hash(block_hash) if isinstance(block_hash, bytes) else block_hash


class KvIndex:
    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.stats = IndexStats()
        # tier -> block hash -> instances holding it; instance -> tier -> its blocks (for removal)
        self._holders: dict[str, dict[int, set[str]]] = {tier: {} for tier in TIERS}
        self._blocks: dict[str, dict[str, set[int]]] = {}
        self._next_sequence: dict[str, int] = {}

    def apply(self, instance: str, batch: EventBatch) -> Outcome:
        expected = self._next_sequence.get(instance)
        outcome = Outcome.APPLIED
        if expected is not None and batch.sequence != expected:
            if batch.sequence == 0:
                self.remove_instance(instance)
                self.stats.restarts += 1
                outcome = Outcome.RESTARTED
            elif batch.sequence < expected:
                return Outcome.DUPLICATE
            else:
                self.stats.gaps += 1
                return Outcome.GAP
        self._next_sequence[instance] = batch.sequence + 1
        self.stats.batches += 1
        self.stats.unknown_events += batch.skipped
        for event in batch.events:
            if isinstance(event, BlockStored):
                self._stored(instance, event)
            elif isinstance(event, BlockRemoved):
                tier = self._tier(event.medium)
                if tier is not None:
                    self._remove(instance, tier, (_key(h) for h in event.block_hashes))
            elif isinstance(event, AllBlocksCleared):
                self._remove(instance, "device", list(self._instance_blocks(instance, "device")))
        return outcome

    def expected_sequence(self, instance: str) -> int | None:
        """The sequence number of the next batch `instance` must send; None before its first."""
        return self._next_sequence.get(instance)

    def resync(self, instance: str) -> None:
        """Forget `instance` (its blocks and its sequence): its next batch starts it afresh."""
        self.remove_instance(instance)

    def remove_instance(self, instance: str) -> None:
        for tier, blocks in self._blocks.pop(instance, {}).items():
            holders = self._holders[tier]
            for block in blocks:
                owners = holders.get(block)
                if owners is not None:
                    owners.discard(instance)
                    if not owners:
                        del holders[block]
        self._next_sequence.pop(instance, None)

    def instances(self) -> set[str]:
        return set(self._next_sequence)

    def block_count(self, tier: str = "device") -> int:
        return len(self._holders[tier])

    def longest_prefixes(self, hashes: Sequence[int], tier: str = "device") -> dict[str, int]:
        """instance -> how many of the leading `hashes` it holds in `tier` (instances holding none are absent)."""
        holders = self._holders[tier]
        matched: dict[str, int] = {}
        alive: set[str] | None = None
        for depth, block in enumerate(hashes, start=1):
            owners = holders.get(block)
            if not owners:
                break
            alive = set(owners) if alive is None else alive & owners
            if not alive:
                break
            for instance in alive:
                matched[instance] = depth
        return matched

    def continue_prefix(self, instance: str, hashes: Sequence[int], start: int, tier: str) -> int:
        """How far `instance` holds `hashes` in `tier` going on from block `start` (returns `start` at least)."""
        blocks = self._blocks.get(instance, {}).get(tier)
        depth = start
        if blocks:
            while depth < len(hashes) and hashes[depth] in blocks:
                depth += 1
        return depth

    def _stored(self, instance: str, event: BlockStored) -> None:
        if event.block_size != self.block_size:
            self.stats.wrong_block_size += 1
            return
        tier = self._tier(event.medium)
        if tier is None:
            return
        holders = self._holders[tier]
        blocks = self._instance_blocks(instance, tier)
        for block_hash in event.block_hashes:
            block = _key(block_hash)
            blocks.add(block)
            holders.setdefault(block, set()).add(instance)
        self.stats.blocks_stored += len(event.block_hashes)

    def _remove(self, instance: str, tier: str, blocks: Iterable[int]) -> None:
        held = self._instance_blocks(instance, tier)
        holders = self._holders[tier]
        for block in blocks:
            if block not in held:
                continue
            held.discard(block)
            owners = holders[block]
            owners.discard(instance)
            if not owners:
                del holders[block]
            self.stats.blocks_removed += 1

    def _instance_blocks(self, instance: str, tier: str) -> set[int]:
        return self._blocks.setdefault(instance, {}).setdefault(tier, set())

    def _tier(self, medium: str | None) -> str | None:
        tier = TIER_OF_MEDIUM.get(medium.upper() if medium else None)
        if tier is None:
            self.stats.unknown_medium += 1
        return tier
