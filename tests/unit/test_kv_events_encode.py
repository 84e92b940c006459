"""motor's KV event encoder (motor/kv/events.py, used by the simulator) against the installed vLLM's own event
classes and msgspec encoder: the same events give byte-identical payloads, and motor's decoder reads them back."""

import msgspec

from motor.kv.block_hashes import BlockHasher
from motor.kv.events import (
    END_OF_REPLAY,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    ClearedBlocks,
    RemovedBlocks,
    StoredBlocks,
    decode_batch,
    decode_sequence,
    encode_batch,
    encode_sequence,
)
from tests.installs import importable, needs_vllm

pytestmark = needs_vllm
if importable("vllm"):
    from vllm.distributed import kv_events as vllm_events

BLOCK = 16
TS = 1764707000.25
PROMPT = list(range(100, 100 + 3 * BLOCK))
HASHES = BlockHasher(BLOCK).event_hashes(PROMPT)


def vllm_payload(events: list[object], rank: int | None = 0) -> bytes:
    return msgspec.msgpack.Encoder().encode(
        vllm_events.KVEventBatch(ts=TS, events=events, data_parallel_rank=rank)
    )


def test_a_stored_segment_encodes_as_vllm_encodes_it() -> None:
    common = {
        "block_hashes": HASHES[1:],
        "parent_block_hash": HASHES[0],
        "token_ids": PROMPT[BLOCK:],
        "block_size": BLOCK,
        "lora_id": None,
        "medium": "GPU",
        "lora_name": None,
        "group_idx": 0,
    }
    assert encode_batch(TS, [StoredBlocks(**common)]) == vllm_payload([vllm_events.BlockStored(**common)])


def test_a_first_segment_with_no_parent_and_no_group_encodes_identically() -> None:
    common = {
        "block_hashes": HASHES,
        "parent_block_hash": None,
        "token_ids": PROMPT,
        "block_size": BLOCK,
        "lora_id": None,
        "medium": None,
        "lora_name": None,
    }
    ours = encode_batch(TS, [StoredBlocks(**common)], data_parallel_rank=None)
    assert ours == vllm_payload([vllm_events.BlockStored(**common)], rank=None)


def test_removed_and_cleared_encode_identically_in_one_batch() -> None:
    ours = encode_batch(
        TS, [RemovedBlocks(block_hashes=HASHES[:2], medium="GPU", group_idx=0), ClearedBlocks()], 3
    )
    theirs = vllm_payload(
        [
            vllm_events.BlockRemoved(block_hashes=HASHES[:2], medium="GPU", group_idx=0),
            vllm_events.AllBlocksCleared(),
        ],
        rank=3,
    )
    assert ours == theirs


def test_motor_decodes_what_it_encodes() -> None:
    payload = encode_batch(
        TS,
        [
            StoredBlocks(
                block_hashes=HASHES,
                parent_block_hash=None,
                token_ids=PROMPT,
                block_size=BLOCK,
                lora_id=None,
                medium="GPU",
                lora_name=None,
                group_idx=0,
            ),
            RemovedBlocks(block_hashes=HASHES[2:], medium="GPU", group_idx=0),
            ClearedBlocks(),
        ],
    )
    batch = decode_batch(7, payload)
    assert batch.sequence == 7 and batch.ts == TS and batch.data_parallel_rank == 0 and batch.skipped == 0
    assert batch.events == [
        BlockStored(block_hashes=HASHES, block_size=BLOCK, medium="GPU"),
        BlockRemoved(block_hashes=HASHES[2:], medium="GPU"),
        AllBlocksCleared(),
    ]


def test_sequence_frames_match_vllms() -> None:
    assert encode_sequence(5) == (5).to_bytes(8, "big")
    assert encode_sequence(END_OF_REPLAY) == vllm_events.ZmqEventPublisher.END_SEQ
    assert decode_sequence(encode_sequence(END_OF_REPLAY)) == END_OF_REPLAY
