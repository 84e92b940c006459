"""Which instance holds which prefix-cache blocks, per tier, kept from the engines' KV events (pure).

Blocks are keyed by their 64-bit event hash (motor.kv.block_hashes). A tier is where a block lives: `device`
(the engine's own KV cache: vLLM's medium `GPU`, or none), `cpu` (`CPU`: an offload tier or the pool) or `disk`
(`STORAGE`).

Each instance has a slot while it holds blocks, and a set of instances is one integer with a bit per slot (-1:
every instance, held or not); the lowest freed slot goes to the next new instance, so masks stay as wide as the
instance count. Blocks are kept in runs: consecutive blocks of one hash chain held by the same instances (a
prefix, a conversation's tail), one mask per run. A prompt's walk (`runs`) costs one lookup and a few
comparisons per run on its path (block hashes are chained: where a prompt's hash equals a run's, everything before
agrees too, so the end of the agreement is found by bisection), not one lookup per block, and what it answers is a few groups of instances
(masks) that hold the same leading blocks, however many instances hold them. Runs are split where their holders
start to differ and a chain one instance extends grows its own run.

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

import heapq
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import Enum

from motor.kv.block_hashes import event_hash
from motor.kv.events import AllBlocksCleared, BlockRemoved, BlockStored, EventBatch

TIERS = ("device", "cpu", "disk")
TIER_OF_MEDIUM = {None: "device", "GPU": "device", "NPU": "device", "CPU": "cpu", "STORAGE": "disk"}
EVERY_INSTANCE = -1


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


class _Run:
    """Consecutive blocks of one chain, first block first, held by the instances of `mask`."""

    __slots__ = ("blocks", "key", "mask")

    def __init__(self, key: int, blocks: tuple[int, ...], mask: int) -> None:
        self.key = key
        self.blocks = blocks
        self.mask = mask


class _Tier:
    """One tier's runs. Blocks map to their run's key, not to the run: dicts and tuples of ints only, which the
    garbage collector does not track, so a million blocks add nothing to its passes."""

    __slots__ = ("next_key", "runs", "where")

    def __init__(self) -> None:
        self.where: dict[int, int] = {}  # block -> its run's key
        self.runs: dict[int, _Run] = {}
        self.next_key = 0

    def run_of(self, block: int) -> _Run | None:
        key = self.where.get(block)
        return None if key is None else self.runs[key]

    def new_run(self, blocks: tuple[int, ...], mask: int) -> _Run:
        run = self.runs[self.next_key] = _Run(self.next_key, blocks, mask)
        self.next_key += 1
        self.where.update(dict.fromkeys(blocks, run.key))
        return run

    def extend(self, run: _Run, blocks: tuple[int, ...]) -> None:
        run.blocks += blocks
        self.where.update(dict.fromkeys(blocks, run.key))

    def forget(self, run: _Run) -> None:
        del self.runs[run.key]
        for block in run.blocks:
            del self.where[block]

    def carve(self, run: _Run, start: int, end: int) -> _Run:
        """The run of `run.blocks[start:end]`, split off `run` if need be (the largest piece stays in `run`, so
        that the fewest blocks move)."""
        blocks = run.blocks
        if start == 0 and end == len(blocks):
            return run
        pieces = [(lo, hi) for lo, hi in ((0, start), (start, end), (end, len(blocks))) if lo < hi]
        largest = max(pieces, key=lambda piece: piece[1] - piece[0])
        carved = run
        for lo, hi in pieces:
            if (lo, hi) != largest:
                piece = self.new_run(blocks[lo:hi], run.mask)
                if lo == start:
                    carved = piece
        run.blocks = blocks[largest[0] : largest[1]]
        return carved


def _key(block_hash: int | bytes) -> int:
    return event_hash(block_hash) if isinstance(block_hash, bytes) else block_hash


def slots_of(mask: int) -> Iterator[int]:
    """The slots whose bits are set in a (non-negative) mask, lowest first."""
    while mask:
        lowest = mask & -mask
        yield lowest.bit_length() - 1
        mask ^= lowest


def _agreeing(a: tuple[int, ...], i: int, b: tuple[int, ...], j: int) -> int:
    """How many items `a[i:]` and `b[j:]` have in common from their starts."""
    length = min(len(a) - i, len(b) - j)
    if a[i : i + length] == (b if j == 0 and length == len(b) else b[j : j + length]):  # a whole run: no copy
        return length
    return next(k for k in range(length) if a[i + k] != b[j + k])


def _chain_agreeing(a: tuple[int, ...], i: int, b: tuple[int, ...], j: int) -> int:
    """`_agreeing` for two hash chains that agree at their starts (`a[i] == b[j]`): a block's hash covers every
    block before it, so they agree up to the last position where they are equal, found by bisection (a few
    comparisons where a run of hundreds of blocks would cost hundreds)."""
    agree, disagree = 1, min(len(a) - i, len(b) - j) + 1
    while disagree - agree > 1:
        middle = (agree + disagree) // 2
        if a[i + middle - 1] == b[j + middle - 1]:
            agree = middle
        else:
            disagree = middle
    return agree


def _position(run: _Run, block: int) -> int:
    return 0 if run.blocks[0] == block else run.blocks.index(block)


class KvIndex:
    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.stats = IndexStats()
        # tier -> its runs; instance -> tier -> its blocks (what it holds, for removals: ints only, see _Tier)
        self._tiers = {tier: _Tier() for tier in TIERS}
        self._blocks: dict[str, dict[str, dict[int, None]]] = {}
        self._next_sequence: dict[str, int] = {}
        self.slots: dict[str, int] = {}  # instance -> its bit
        self.names: list[str | None] = []  # bit -> instance (None: a free slot)
        self.slot_version = 0  # counts the changes of `slots`
        self._free_slots: list[int] = []

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
                    self._remove(instance, tier, tuple(_key(h) for h in event.block_hashes))
            elif isinstance(event, AllBlocksCleared):
                self._drop(instance, "device")
        return outcome

    def expected_sequence(self, instance: str) -> int | None:
        """The sequence number of the next batch `instance` must send; None before its first."""
        return self._next_sequence.get(instance)

    def resync(self, instance: str) -> None:
        """Forget `instance` (its blocks and its sequence): its next batch starts it afresh."""
        self.remove_instance(instance)

    def remove_instance(self, instance: str) -> None:
        for tier in TIERS:
            self._drop(instance, tier)
        self._blocks.pop(instance, None)
        slot = self.slots.pop(instance, None)
        if slot is not None:
            self.names[slot] = None
            heapq.heappush(self._free_slots, slot)
            self.slot_version += 1
        self._next_sequence.pop(instance, None)

    def instances(self) -> set[str]:
        return set(self._next_sequence)

    def block_count(self, tier: str = "device") -> int:
        return len(self._tiers[tier].where)

    def held_blocks(self, instance: str, tier: str = "device") -> int:
        return len(self._blocks.get(instance, {}).get(tier, ()))

    def run_count(self, tier: str = "device") -> int:
        return len(self._tiers[tier].runs)

    def runs(self, hashes: Sequence[int], tier: str, start: int, members: int) -> list[tuple[int, int]]:
        """Split the instances of `members` (a mask) by how far each holds `hashes[start:]` in `tier`, walking
        from `start`: `[(end, mask)]`, ends ascending, each instance in exactly one mask (an `end` equal to `start`
        holds not even `hashes[start]`). Instances outside the index stay in the first run."""
        tier_runs = self._tiers[tier]
        if start >= len(hashes) or hashes[start] not in tier_runs.where:  # most walks of a CPU or disk tier
            return [(start, members)] if members else []
        hashes = tuple(hashes)
        found: list[tuple[int, int]] = []
        alive = members
        end = start
        while alive and end < len(hashes):
            run = tier_runs.run_of(hashes[end])
            if run is None:
                break
            kept = alive & run.mask
            if kept != alive:
                found.append((end, alive ^ kept))
                alive = kept
            end += _chain_agreeing(hashes, end, run.blocks, _position(run, hashes[end]))
        if alive:
            found.append((end, alive))
        return found

    def longest_prefixes(self, hashes: Sequence[int], tier: str = "device") -> dict[str, int]:
        """instance -> how many of the leading `hashes` it holds in `tier` (instances holding none are absent)."""
        names = self.names
        return {
            names[slot]: end  # type: ignore[misc]
            for end, members in self.runs(hashes, tier, 0, EVERY_INSTANCE)
            if end
            for slot in slots_of(members)
        }

    # ---- changes ----------------------------------------------------------------------------------------------

    def _stored(self, instance: str, event: BlockStored) -> None:
        if event.block_size != self.block_size:
            self.stats.wrong_block_size += 1
            return
        tier = self._tier(event.medium)
        if tier is None:
            return
        bit = 1 << self._slot(instance)
        held = self._blocks.setdefault(instance, {}).setdefault(tier, {})
        runs = self._tiers[tier]
        blocks = tuple(_key(h) for h in event.block_hashes)
        before = None if event.parent_block_hash is None else _key(event.parent_block_hash)
        i = 0
        while i < len(blocks):
            run = runs.run_of(blocks[i])
            if run is None:  # blocks nobody holds: the instance's own run, or the end of its run before
                j = i + 1
                while j < len(blocks) and blocks[j] not in runs.where:
                    j += 1
                fresh = blocks[i:j]
                run = runs.run_of(before) if before is not None else None
                if run is not None and run.mask == bit and run.blocks[-1] == before:
                    runs.extend(run, fresh)
                else:
                    runs.new_run(fresh, bit)
                held.update(dict.fromkeys(fresh))
                i = j
            else:  # blocks someone holds: the instance joins their holders
                at = _position(run, blocks[i])
                length = _agreeing(blocks, i, run.blocks, at)
                if not run.mask & bit:
                    piece = runs.carve(run, at, at + length)
                    piece.mask |= bit
                    held.update(dict.fromkeys(piece.blocks))
                i += length
            before = blocks[i - 1]
        self.stats.blocks_stored += len(blocks)

    def _remove(self, instance: str, tier: str, blocks: tuple[int, ...]) -> None:
        held = self._blocks.get(instance, {}).get(tier)
        if not held:
            return
        runs = self._tiers[tier]
        i = 0
        while i < len(blocks):
            run = runs.run_of(blocks[i]) if blocks[i] in held else None
            if run is None:
                i += 1
                continue
            at = _position(run, blocks[i])
            length = _agreeing(blocks, i, run.blocks, at)
            self._release(runs, runs.carve(run, at, at + length), instance, held)
            i += length

    def _drop(self, instance: str, tier: str) -> None:
        """Everything `instance` holds in `tier`."""
        held = self._blocks.get(instance, {}).get(tier)
        if not held:
            return
        runs = self._tiers[tier]
        for key in {runs.where[block] for block in held}:
            self._release(runs, runs.runs[key], instance, held)

    def _release(self, runs: _Tier, run: _Run, instance: str, held: dict[int, None]) -> None:
        """`instance` no longer holds any block of `run`."""
        run.mask &= ~(1 << self.slots[instance])
        for block in run.blocks:
            del held[block]
        if not run.mask:
            runs.forget(run)
        self.stats.blocks_removed += len(run.blocks)

    def _slot(self, instance: str) -> int:
        slot = self.slots.get(instance)
        if slot is None:
            if self._free_slots:
                slot = heapq.heappop(self._free_slots)
                self.names[slot] = instance
            else:
                slot = len(self.names)
                self.names.append(instance)
            self.slots[instance] = slot
            self.slot_version += 1
        return slot

    def _tier(self, medium: str | None) -> str | None:
        tier = TIER_OF_MEDIUM.get(medium.upper() if medium else None)
        if tier is None:
            self.stats.unknown_medium += 1
        return tier
