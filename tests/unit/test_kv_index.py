"""The KV index (motor/kv/index.py) and the event decoder (motor/kv/events.py): batches encoded by the installed
vLLM's own event classes and encoder, decoded by motor, applied to the index — sequence gaps, restarts,
duplicates, wrong block sizes, unknown media and event types, garbage bytes."""

import contextlib

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from motor.kv.block_hashes import BlockHasher
from motor.kv.events import EventDecodeError, decode_batch, decode_message, replay_request
from motor.kv.index import KvIndex, Outcome
from tests.installs import importable, needs_vllm

pytestmark = needs_vllm
if importable("vllm"):
    from vllm.distributed import kv_events as vllm_events

BLOCK = 4
ENCODER = msgspec.msgpack.Encoder()


def stored(hashes: list[int], *, block_size: int = BLOCK, medium: str | None = "GPU") -> object:
    return vllm_events.BlockStored(
        block_hashes=hashes,
        parent_block_hash=None,
        token_ids=list(range(len(hashes) * block_size)),
        block_size=block_size,
        lora_id=None,
        medium=medium,
        lora_name=None,
    )


def removed(hashes: list[int], medium: str | None = "GPU") -> object:
    return vllm_events.BlockRemoved(block_hashes=hashes, medium=medium)


def wire(sequence: int, *events: object) -> list[bytes]:
    """The frames vLLM's ZMQ publisher sends for one batch."""
    batch = vllm_events.KVEventBatch(ts=1.0, events=list(events), data_parallel_rank=0)
    return [b"", sequence.to_bytes(8, "big"), ENCODER.encode(batch)]


def apply(index: KvIndex, instance: str, sequence: int, *events: object) -> Outcome:
    batch = decode_message(wire(sequence, *events))
    assert batch is not None
    return index.apply(instance, batch)


def test_stored_blocks_of_a_prompt_are_matched_per_instance_and_tier() -> None:
    hashes = BlockHasher(BLOCK).event_hashes(list(range(40)))  # 10 blocks
    index = KvIndex(BLOCK)
    assert apply(index, "p0", 0, stored(hashes[:10])) is Outcome.APPLIED
    assert apply(index, "p1", 0, stored(hashes[:3]), stored(hashes[3:6], medium="CPU")) is Outcome.APPLIED
    assert index.longest_prefixes(hashes) == {"p0": 10, "p1": 3}
    assert index.longest_prefixes(hashes, "cpu") == {}, "the CPU tier holds no leading block"
    assert index.longest_prefixes(hashes[3:], "cpu") == {"p1": 3}
    assert index.longest_prefixes(BlockHasher(BLOCK).event_hashes([9, 9, 9, 9])) == {}


def test_removed_blocks_and_a_cleared_cache_are_forgotten() -> None:
    index = KvIndex(BLOCK)
    apply(index, "p0", 0, stored([1, 2, 3, 4]))
    apply(index, "p0", 1, removed([3]))
    assert index.longest_prefixes([1, 2, 3, 4]) == {"p0": 2}
    apply(index, "p0", 2, vllm_events.AllBlocksCleared())
    assert index.longest_prefixes([1, 2]) == {} and index.block_count() == 0


def test_a_gap_applies_nothing_until_replayed_or_resynced() -> None:
    index = KvIndex(BLOCK)
    apply(index, "p0", 0, stored([1]))
    assert apply(index, "p0", 2, stored([2])) is Outcome.GAP
    assert index.longest_prefixes([1, 2]) == {"p0": 1} and index.expected_sequence("p0") == 1
    assert apply(index, "p0", 1, removed([1])) is Outcome.APPLIED  # the replayed batch
    assert apply(index, "p0", 2, stored([2])) is Outcome.APPLIED
    assert index.longest_prefixes([2]) == {"p0": 1} and index.longest_prefixes([1]) == {}
    assert apply(index, "p0", 9, stored([3])) is Outcome.GAP
    index.resync("p0")
    assert apply(index, "p0", 9, stored([3])) is Outcome.APPLIED
    assert index.longest_prefixes([2]) == {}, "a resync forgets what it can no longer vouch for"
    assert index.stats.gaps == 2


def test_a_replay_that_overlaps_what_arrived_is_skipped() -> None:
    index = KvIndex(BLOCK)
    for sequence in range(3):
        apply(index, "p0", sequence, stored([sequence + 10]))
    assert apply(index, "p0", 1, removed([11])) is Outcome.DUPLICATE
    assert index.longest_prefixes([11]) == {"p0": 1}


def test_an_engine_restart_drops_what_it_held() -> None:
    index = KvIndex(BLOCK)
    apply(index, "p0", 0, stored([1, 2]))
    apply(index, "p0", 1, stored([3]))
    assert apply(index, "p0", 0, stored([7])) is Outcome.RESTARTED
    assert index.longest_prefixes([1]) == {} and index.longest_prefixes([7]) == {"p0": 1}


def test_a_removed_instance_leaves_no_block_behind() -> None:
    index = KvIndex(BLOCK)
    apply(index, "p0", 0, stored([1, 2]))
    apply(index, "p1", 0, stored([1]))
    index.remove_instance("p0")
    assert index.longest_prefixes([1, 2]) == {"p1": 1} and index.block_count() == 1
    assert index.instances() == {"p1"}


def test_events_the_index_cannot_use_are_counted_not_applied() -> None:
    index = KvIndex(BLOCK)
    apply(index, "p0", 0, stored([1], block_size=16), stored([2], medium="TAPE"), stored([3]))
    assert index.longest_prefixes([3]) == {"p0": 1} and index.block_count() == 1
    assert (index.stats.wrong_block_size, index.stats.unknown_medium) == (1, 1)


def test_an_event_type_motor_does_not_know_skips_only_itself() -> None:
    known = ENCODER.encode(stored([5]))
    unknown = ENCODER.encode({"type": "BlockPromoted", "block_hashes": [5]})
    payload = ENCODER.encode([1.0, [msgspec.Raw(unknown), msgspec.Raw(known)], 0])
    batch = decode_batch(0, payload)
    assert batch.skipped == 1 and len(batch.events) == 1


def test_full_digests_are_keyed_like_event_hashes() -> None:
    hasher = BlockHasher(BLOCK)
    tokens = list(range(8))
    index = KvIndex(BLOCK)
    apply(index, "p0", 0, stored(hasher.hashes(tokens)))  # VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0
    assert index.longest_prefixes(hasher.event_hashes(tokens)) == {"p0": 2}


def test_the_end_of_a_replay_and_the_replay_request() -> None:
    assert decode_message([b"", (-1).to_bytes(8, "big", signed=True), b""]) is None
    assert replay_request(42) == (42).to_bytes(8, "big")


@settings(max_examples=300, deadline=None)
@given(frames=st.lists(st.binary(max_size=64), min_size=0, max_size=4))
def test_garbage_raises_the_decoders_own_error(frames: list[bytes]) -> None:
    with contextlib.suppress(EventDecodeError):
        decode_message(frames)
