"""The coordinator's KV event subscription against a publisher this test plays (ZMQ XPUB and a replay ROUTER on ipc
sockets, vLLM's wire format): each message's outcome, replays, resyncs and the subscription's state reach the
metrics; garbage bytes, gaps and a publisher that dies are counted and seen, and the index keeps answering."""

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import zmq
import zmq.asyncio
from prometheus_client import CollectorRegistry

from motor.coordinator.kv_events.subscriber import KvEventSubscriber
from motor.coordinator.metrics import KvEventMetrics
from motor.kv.events import StoredBlocks, encode_batch, encode_sequence
from motor.kv.index import KvIndex
from tests.unit.test_coordinator_scheduling import make_target

BLOCK = 16
TOPIC = b"kv-events"
WAIT_S = 5.0


def stored(blocks: list[int], block_size: int = BLOCK) -> StoredBlocks:
    return StoredBlocks(
        block_hashes=blocks,
        parent_block_hash=None,
        token_ids=[7] * (len(blocks) * block_size),
        block_size=block_size,
        lora_id=None,
        medium="GPU",
        lora_name=None,
    )


def message(sequence: int, *events: StoredBlocks) -> list[bytes]:
    return [TOPIC, encode_sequence(sequence), encode_batch(time.time(), list(events))]


@dataclass
class Engine:
    """The publishing side: an XPUB (it sees the subscription arrive) and a replay socket answering from
    `buffer` (sequence -> message), or not at all while `replay_answers` is False."""

    pub: zmq.asyncio.Socket
    replay: zmq.asyncio.Socket
    buffer: dict[int, list[bytes]]
    replay_answers: bool = True

    async def publish(self, sequence: int, *events: StoredBlocks) -> None:
        frames = message(sequence, *events)
        self.buffer[sequence] = frames
        await self.pub.send_multipart(frames)

    async def serve_replays(self) -> None:
        while True:
            identity, _, start = await self.replay.recv_multipart()
            if not self.replay_answers:
                continue
            first = int.from_bytes(start, "big")
            for sequence in sorted(s for s in self.buffer if s >= first):
                await self.replay.send_multipart([identity, b"", *self.buffer[sequence]])
            await self.replay.send_multipart([identity, b"", TOPIC, encode_sequence(-1), b""])


@dataclass
class Feed:
    engine: Engine
    index: KvIndex
    subscriber: KvEventSubscriber
    registry: CollectorRegistry
    key: str

    def value(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, {"instance": self.key, **labels}) or 0.0

    async def until(self, holds: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while not holds():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            await asyncio.sleep(0.01)


@pytest.fixture
async def feed(tmp_path: Path) -> AsyncIterator[Feed]:
    context = zmq.asyncio.Context()
    pub, replay = context.socket(zmq.XPUB), context.socket(zmq.ROUTER)
    pub.bind(f"ipc://{tmp_path}/events")
    replay.bind(f"ipc://{tmp_path}/replay")
    engine = Engine(pub, replay, {})
    serving = asyncio.create_task(engine.serve_replays())
    registry = CollectorRegistry()
    index = KvIndex(BLOCK)
    subscriber = KvEventSubscriber(index, KvEventMetrics(registry))
    target = replace(
        make_target(0), kv_events=f"ipc://{tmp_path}/events", kv_events_replay=f"ipc://{tmp_path}/replay"
    )
    subscriber.set_targets([target])
    assert await pub.poll(WAIT_S * 1000), "the coordinator never subscribed"
    await pub.recv()  # its subscription: from here on every message reaches it
    try:
        yield Feed(engine, index, subscriber, registry, target.key)
    finally:
        await subscriber.close()
        serving.cancel()
        pub.close(linger=0)
        replay.close(linger=0)
        context.term()


async def test_batches_gaps_and_garbage_are_counted_and_routing_goes_on(feed: Feed) -> None:
    events = "motor_coordinator_kv_events_total"
    await feed.until(
        lambda: feed.value("motor_coordinator_kv_event_feed", state="connected") == 1, "connected"
    )
    await feed.until(
        lambda: feed.value("motor_coordinator_kv_event_replays_total", result="complete") == 1,
        "the replay on subscribing",
    )
    await feed.engine.publish(0, stored([1, 2, 3]))
    await feed.engine.pub.send_multipart([TOPIC, b"not a sequence", b"\xc1garbage"])
    await feed.engine.pub.send_multipart([TOPIC, encode_sequence(1), b"\x93\xc1\xc1"])
    await feed.until(lambda: feed.value(events, outcome="undecodable") == 2, "two undecodable messages")
    assert feed.value(events, outcome="applied") == 1
    assert feed.value("motor_coordinator_kv_event_last_batch_timestamp_seconds") == pytest.approx(
        time.time(), abs=5
    )

    # batch 1 never arrives live: batch 2 is a gap, the replay socket fills it, then batch 2 applies
    feed.engine.buffer[1] = message(1, stored([1, 2, 3, 4]))
    await feed.engine.publish(2, stored([1, 2, 3, 4, 5]))
    await feed.until(lambda: feed.value(events, outcome="applied") == 3, "the replayed batch and batch 2")
    assert feed.value(events, outcome="gap") == 1
    assert feed.value("motor_coordinator_kv_event_replays_total", result="complete") == 2
    assert feed.index.longest_prefixes([1, 2, 3, 4, 5]) == {feed.key: 5}

    # batches 3-5 are lost and the replay socket does not answer: the instance is resynced from batch 6
    feed.engine.replay_answers = False
    await feed.engine.publish(6, stored([9]))
    await feed.until(lambda: feed.value("motor_coordinator_kv_event_resyncs_total") == 1, "a resync")
    assert feed.value("motor_coordinator_kv_event_replays_total", result="failed") == 1
    assert feed.index.longest_prefixes([1]) == {} and feed.index.longest_prefixes([9]) == {feed.key: 1}

    # blocks of another size are counted by the index and never match
    await feed.engine.publish(7, stored([10], block_size=32))
    await feed.until(lambda: feed.index.stats.wrong_block_size == 1, "the wrong block size counted")
    assert feed.index.longest_prefixes([10]) == {}


async def test_a_publisher_that_dies_shows_and_an_instance_that_leaves_stops(feed: Feed) -> None:
    state = "motor_coordinator_kv_event_feed"
    await feed.until(lambda: feed.value(state, state="connected") == 1, "connected")
    await feed.engine.publish(0, stored([1, 2]))
    await feed.until(lambda: feed.index.held_blocks(feed.key) == 2, "the blocks indexed")
    metrics = feed.subscriber.observer
    assert isinstance(metrics, KvEventMetrics)
    metrics.held(feed.key, "device", feed.index.held_blocks(feed.key))
    assert feed.value("motor_coordinator_kv_index_blocks", tier="device") == 2

    feed.engine.pub.close(linger=0)  # the engine is gone
    await feed.until(lambda: feed.value(state, state="disconnected") == 1, "disconnected")
    assert feed.value(state, state="connected") == 0
    assert feed.value("motor_coordinator_kv_event_disconnects_total") == 1
    assert feed.index.longest_prefixes([1, 2]) == {feed.key: 2}, "what it held is still known until it leaves"

    feed.subscriber.set_targets([])
    await feed.until(lambda: feed.value(state, state="stopped") == 1, "stopped")
    assert feed.value("motor_coordinator_kv_index_blocks", tier="device") == 0
    assert feed.index.longest_prefixes([1, 2]) == {}
