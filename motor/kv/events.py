"""vLLM's KV cache events as they arrive on the wire, decoded (pure: bytes in, typed events out).

An engine started with `--kv-events-config` (publisher `zmq`) sends one ZMQ multipart message per batch:
`(topic, sequence number as 8 bytes big-endian, payload)`. The payload is a msgpack array `[ts, events,
data_parallel_rank]`; each event a msgpack map tagged by its `type`: `BlockStored` (block hashes, parent hash,
token ids, block size, medium, ...), `BlockRemoved` (block hashes, medium) or `AllBlocksCleared`. A replay
request (the 8-byte sequence to start from, on the engine's ROUTER socket) is answered with the buffered batches
in the same three frames, then a frame whose sequence is -1.

`encode_batch` is the other direction, for motor's engine simulator: the payload vLLM's publisher sends for the
same events, byte for byte (the structs below mirror vLLM's field order, tags and defaults).

Events of a type motor does not know are skipped one by one, so a newer vLLM's additions do not hide the rest of
a batch; a payload that is not a batch raises `EventDecodeError`.
"""

from dataclasses import dataclass

import msgspec

END_OF_REPLAY = -1


class EventDecodeError(ValueError):
    """The bytes are not a KV event message."""


# Only the fields the index reads are decoded; msgspec skips the rest (token ids, LoRA, ...) unread.
class BlockStored(msgspec.Struct, tag=True, omit_defaults=True):
    block_hashes: list[int | bytes]
    block_size: int
    medium: str | None = None
    parent_block_hash: int | bytes | None = None


class BlockRemoved(msgspec.Struct, tag=True, omit_defaults=True):
    block_hashes: list[int | bytes]
    medium: str | None = None


class AllBlocksCleared(msgspec.Struct, tag=True, omit_defaults=True):
    pass


KvEvent = BlockStored | BlockRemoved | AllBlocksCleared


class _RawBatch(msgspec.Struct, array_like=True):
    ts: float
    events: list[msgspec.Raw]
    data_parallel_rank: int | None = None


@dataclass(frozen=True, slots=True)
class EventBatch:
    sequence: int
    ts: float
    events: list[KvEvent]
    data_parallel_rank: int | None
    skipped: int  # events of a type motor does not know


_batch_decoder = msgspec.msgpack.Decoder(_RawBatch)
_event_decoder = msgspec.msgpack.Decoder(KvEvent)


def decode_sequence(frame: bytes) -> int:
    if len(frame) != 8:
        raise EventDecodeError(f"a sequence number is 8 bytes, not {len(frame)}")
    return int.from_bytes(frame, "big", signed=True)


def decode_batch(sequence: int, payload: bytes) -> EventBatch:
    try:
        raw = _batch_decoder.decode(payload)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise EventDecodeError(f"not a KV event batch: {exc}") from None
    events: list[KvEvent] = []
    skipped = 0
    for item in raw.events:
        try:
            events.append(_event_decoder.decode(item))
        except (msgspec.DecodeError, msgspec.ValidationError):
            skipped += 1
    return EventBatch(sequence, raw.ts, events, raw.data_parallel_rank, skipped)


def decode_message(frames: list[bytes]) -> EventBatch | None:
    """One published or replayed message `(topic, sequence, payload)`; None for the end-of-replay marker."""
    if len(frames) != 3:
        raise EventDecodeError(f"a KV event message has 3 frames, not {len(frames)}")
    sequence = decode_sequence(frames[1])
    if sequence == END_OF_REPLAY:
        return None
    return decode_batch(sequence, frames[2])


# ---- encoding: what an engine publishes ---------------------------------------------------------------------
# vLLM's events are tagged maps (`type` first, then the fields in declaration order, fields equal to their default
# left out), the batch an array. Fields, order and defaults mirror vLLM 0.32's vllm/distributed/kv_events.py: the
# ones vLLM declares without a default are always on the wire, even as nil, so they have none here either.

MEDIUM_GPU = "GPU"


class StoredBlocks(msgspec.Struct, tag="BlockStored", omit_defaults=True, kw_only=True):
    """Full blocks that entered an engine's prefix cache: one chain segment, `parent_block_hash` its parent."""

    block_hashes: list[int | bytes]
    parent_block_hash: int | bytes | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[tuple | None] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None
    locality: str | None = None
    ownership: str | None = None
    session_id: str | None = None


class RemovedBlocks(msgspec.Struct, tag="BlockRemoved", omit_defaults=True, kw_only=True):
    block_hashes: list[int | bytes]
    medium: str | None
    group_idx: int | None = None
    locality: str | None = None
    ownership: str | None = None


class ClearedBlocks(msgspec.Struct, tag="AllBlocksCleared", omit_defaults=True):
    pass


PublishedEvent = StoredBlocks | RemovedBlocks | ClearedBlocks


class _Batch(msgspec.Struct, array_like=True, omit_defaults=True):
    ts: float
    events: list[PublishedEvent]
    data_parallel_rank: int | None = None


_encoder = msgspec.msgpack.Encoder()


def encode_batch(ts: float, events: list[PublishedEvent], data_parallel_rank: int | None = 0) -> bytes:
    """The msgpack payload of one batch, byte for byte as vLLM's ZmqEventPublisher encodes it (which sets the
    batch's rank to its data-parallel rank, 0 for a single engine)."""
    return _encoder.encode(_Batch(ts, events, data_parallel_rank))


def encode_sequence(sequence: int) -> bytes:
    """A message's sequence frame (8 bytes, big-endian; the end-of-replay marker -1 as two's complement)."""
    return sequence.to_bytes(8, "big", signed=True)


def replay_request(start: int) -> bytes:
    """The frame that asks an engine's replay socket for every buffered batch from `start` on."""
    return start.to_bytes(8, "big")
