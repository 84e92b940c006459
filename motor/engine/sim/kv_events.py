"""The simulator's KV event publisher: vLLM's `--kv-events-config` and the batches vLLM's ZMQ publisher sends.

What a simulated engine's prefix cache gains and loses goes out as vLLM's events (`BlockStored` for blocks that
entered the cache, `BlockRemoved` for evicted ones) with vLLM's block hashes (motor.kv.block_hashes: the same
algorithm, seed and block size as a vLLM engine with these flags), so a coordinator routes on a simulated cluster
exactly as on a vLLM one. The sockets follow vLLM's: a PUB socket (bound for `*`, `::` and ipc:// endpoints, else
connected) sending `(topic, sequence, payload)`, and a ROUTER replay socket answering `[start sequence]` with the
buffered batches from there on, then the end-of-replay marker. Virtual engine `i` (i > 0) publishes on the tcp
port + i, or on the ipc path + `_dp<i>`.
"""

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Sequence

import zmq
import zmq.asyncio

from motor.engine.sim.config import KvEventsConfig
from motor.kv.block_hashes import BlockHasher
from motor.kv.events import (
    END_OF_REPLAY,
    MEDIUM_GPU,
    PublishedEvent,
    RemovedBlocks,
    StoredBlocks,
    decode_sequence,
    encode_batch,
    encode_sequence,
)

log = logging.getLogger(__name__)


def _binds(endpoint: str) -> bool:
    return "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://"))


class KvEventPublisher:
    """One engine's PUB and replay sockets and the buffer of its last `buffer_steps` batches."""

    def __init__(self, config: KvEventsConfig, *, data_parallel_rank: int = 0) -> None:
        self._config = config
        self._rank = data_parallel_rank
        self._topic = config.topic.encode()
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=config.buffer_steps)
        self._sequence = 0
        self.dropped = 0
        self._context = zmq.asyncio.Context()
        self._pub = self._context.socket(zmq.PUB)
        self._pub.set_hwm(config.hwm)
        self._pub.setsockopt(zmq.LINGER, 0)
        self._replay: zmq.asyncio.Socket | None = None
        self._replay_task: asyncio.Task[None] | None = None
        try:
            if _binds(config.endpoint):
                self._pub.bind(config.endpoint)
            else:
                self._pub.connect(config.endpoint)
            if config.replay_endpoint is not None:
                self._replay = self._context.socket(zmq.ROUTER)
                self._replay.setsockopt(zmq.LINGER, 0)
                self._replay.bind(config.replay_endpoint)
        except zmq.ZMQError as exc:
            self._close_sockets()
            raise OSError(
                f"kv-events-config: cannot open {config.endpoint} / {config.replay_endpoint}: {exc}"
            ) from None

    def start(self) -> None:
        """Answer replay requests from now on (a subscriber asks for one as soon as it connects)."""
        if self._replay is not None and self._replay_task is None:
            self._replay_task = asyncio.get_running_loop().create_task(self._serve_replay(self._replay))

    def publish(self, events: list[PublishedEvent]) -> None:
        """Send one batch now (a PUB socket never blocks: past its high-water mark the batch is dropped, as
        vLLM's is, and a subscriber recovers it from the replay buffer)."""
        sequence = self._sequence
        self._sequence += 1
        payload = encode_batch(time.time(), events, self._rank)
        self._buffer.append((sequence, payload))
        try:
            self._pub.send_multipart([self._topic, encode_sequence(sequence), payload], flags=zmq.NOBLOCK)
        except zmq.Again:
            self.dropped += 1

    async def _serve_replay(self, router: zmq.asyncio.Socket) -> None:
        while True:
            frames = await router.recv_multipart()
            if len(frames) != 3:
                log.warning("kv events: a replay request has 3 frames, not %d", len(frames))
                continue
            client, _, start = frames
            try:
                first = decode_sequence(start)
            except ValueError as exc:
                log.warning("kv events: bad replay request: %s", exc)
                continue
            for sequence, payload in list(self._buffer):
                if sequence >= first:
                    await router.send_multipart(
                        [client, b"", self._topic, encode_sequence(sequence), payload]
                    )
            await router.send_multipart([client, b"", b"", encode_sequence(END_OF_REPLAY), b""])

    async def close(self) -> None:
        if self._replay_task is not None:
            self._replay_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._replay_task
        self._close_sockets()

    def _close_sockets(self) -> None:
        self._pub.close(linger=0)
        if self._replay is not None:
            self._replay.close(linger=0)
        self._context.term()


class PrefixCacheEvents:
    """Turns the simulator's prefix-cache changes into vLLM's events, with vLLM's hashes for the same blocks.

    The simulator keys its cache by its own chained hashes (motor.kv.pool_keys); this keeps, for every block the
    cache holds, the hash a vLLM engine gives the same tokens, so an eviction is published under that hash.
    """

    def __init__(self, publisher: KvEventPublisher, hasher: BlockHasher) -> None:
        self._publisher = publisher
        self._hasher = hasher
        self._event_hashes: dict[bytes, int] = {}

    def start(self) -> None:
        self._publisher.start()

    def changed(
        self,
        prompt: Sequence[int],
        block_keys: Sequence[bytes],
        stored: Sequence[int],
        evicted: Sequence[bytes],
    ) -> None:
        """`stored`: indexes into the prompt's blocks (`block_keys`, first block first) that entered the cache;
        `evicted`: the cache keys it dropped meanwhile."""
        if not stored and not evicted:
            return
        size = self._hasher.block_size
        hashes = self._hasher.event_hashes(prompt[: len(block_keys) * size]) if stored else []
        events: list[PublishedEvent] = []
        for first, last in _runs(stored):
            for index in range(first, last + 1):
                self._event_hashes[block_keys[index]] = hashes[index]
            events.append(
                StoredBlocks(
                    block_hashes=hashes[first : last + 1],
                    parent_block_hash=hashes[first - 1] if first else None,
                    token_ids=list(prompt[first * size : (last + 1) * size]),
                    block_size=size,
                    lora_id=None,
                    medium=MEDIUM_GPU,
                    lora_name=None,
                )
            )
        removed = [h for key in evicted if (h := self._event_hashes.pop(key, None)) is not None]
        if removed:
            events.append(RemovedBlocks(block_hashes=removed, medium=MEDIUM_GPU))
        if events:
            self._publisher.publish(events)

    async def close(self) -> None:
        await self._publisher.close()


def _runs(indexes: Sequence[int]) -> list[tuple[int, int]]:
    """Consecutive stretches of sorted indexes, as (first, last)."""
    runs: list[tuple[int, int]] = []
    for index in indexes:
        if runs and runs[-1][1] == index - 1:
            runs[-1] = (runs[-1][0], index)
        else:
            runs.append((index, index))
    return runs
