"""The engines' KV events into this process's index: one ZMQ SUB socket per prefill/union endpoint.

Every coordinator worker (and every replica) subscribes to every engine itself: an engine's publisher binds, so
any number of subscribers connect, and each process holds the same index, fed by the same events — no process
between the events and a pick, and nothing shared to lock.

Per endpoint (`EndpointFeed`):
- on connect it asks the engine's replay socket for everything buffered from sequence 0, so a coordinator that
  starts after the engines still learns what they hold; live batches the replay covered are duplicates, skipped;
- a gap (batches lost to a full queue) is replayed from the first missing sequence; if the replay cannot fill it
  (no replay socket, the engine's buffer moved on, no answer within REPLAY_TIMEOUT_S), the endpoint is resynced:
  what was known of it is forgotten and the index goes on from the batch at hand;
- an engine restart (its sequence back at 0) drops its entries (`KvIndex.apply`);
- undecodable messages are counted and skipped; an endpoint that leaves the instance set is forgotten.
A publisher that falls silent is not a fault (an idle engine publishes nothing); when its instance leaves, its
entries go.
"""

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass

import zmq
import zmq.asyncio

from motor.coordinator.registry import Target
from motor.kv.events import EventBatch, EventDecodeError, decode_message, replay_request
from motor.kv.index import KvIndex, Outcome

log = logging.getLogger(__name__)

REPLAY_TIMEOUT_S = 1.0
RECEIVE_HWM = 100_000


@dataclass
class FeedStats:
    messages: int = 0
    undecodable: int = 0
    replays: int = 0
    replay_failures: int = 0
    resyncs: int = 0


@dataclass(frozen=True)
class FeedAddress:
    key: str  # the endpoint's target key: the index's instance name
    events: str
    replay: str | None


class EndpointFeed:
    def __init__(self, address: FeedAddress, index: KvIndex, context: zmq.asyncio.Context, stats: FeedStats):
        self.address = address
        self.index = index
        self.context = context
        self.stats = stats
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name=f"kv-events-{self.address.key}")
        self.task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.warning("kv events from %s stopped: %s", self.address.key, task.exception())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        self.index.remove_instance(self.address.key)

    async def _run(self) -> None:
        sub = self.context.socket(zmq.SUB)
        sub.setsockopt(zmq.RCVHWM, RECEIVE_HWM)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(self.address.events)
        try:
            await self._replay(0)
            while True:
                frames = await sub.recv_multipart()
                self.stats.messages += 1
                try:
                    batch = decode_message(frames)
                except EventDecodeError as exc:
                    self.stats.undecodable += 1
                    log.debug("kv events from %s: %s", self.address.key, exc)
                    continue
                if batch is not None:
                    await self._apply(batch)
        finally:
            sub.close(linger=0)

    async def _apply(self, batch: EventBatch) -> None:
        key = self.address.key
        if self.index.apply(key, batch) is not Outcome.GAP:
            return
        expected = self.index.expected_sequence(key)
        replayed = expected is not None and await self._replay(expected)
        if replayed and self.index.apply(key, batch) is not Outcome.GAP:
            return
        self.stats.resyncs += 1
        self.index.resync(key)
        self.index.apply(key, batch)

    async def _replay(self, start: int) -> bool:
        """Apply the engine's buffered batches from `start`; False when the replay did not complete."""
        if self.address.replay is None:
            return False
        self.stats.replays += 1
        dealer = self.context.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(self.address.replay)
        try:
            await dealer.send_multipart([b"", replay_request(start)])
            while True:
                frames = await asyncio.wait_for(dealer.recv_multipart(), REPLAY_TIMEOUT_S)
                batch = decode_message(frames[1:])  # after the ROUTER's empty delimiter
                if batch is None:
                    return True
                if self.index.apply(self.address.key, batch) is Outcome.GAP:
                    return False
        except (TimeoutError, EventDecodeError, zmq.ZMQError) as exc:
            self.stats.replay_failures += 1
            log.debug("kv event replay from %s failed: %s", self.address.key, exc)
            return False
        finally:
            dealer.close(linger=0)


class KvEventSubscriber:
    """Keeps one feed per endpoint that publishes KV events, following the instance set."""

    def __init__(self, index: KvIndex) -> None:
        self.index = index
        self.stats = FeedStats()
        self._context = zmq.asyncio.Context()
        self._feeds: dict[FeedAddress, EndpointFeed] = {}
        self._pending: set[asyncio.Task[None]] = set()

    def set_targets(self, targets: Iterable[Target]) -> None:
        """The registry's subscriber hook: start feeds for new publishers, stop those that left."""
        wanted = {
            FeedAddress(target.key, target.kv_events, target.kv_events_replay)
            for target in targets
            if target.kv_events is not None
        }
        for address in [a for a in self._feeds if a not in wanted]:
            task = asyncio.create_task(self._feeds.pop(address).stop())
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)
        for address in wanted - self._feeds.keys():
            feed = self._feeds[address] = EndpointFeed(address, self.index, self._context, self.stats)
            feed.start()

    async def close(self) -> None:
        feeds, self._feeds = list(self._feeds.values()), {}
        for feed in feeds:
            await feed.stop()
        for task in list(self._pending):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._context.term()
