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
entries go. A publisher that dies is seen at once: ZMQ tells the subscription it disconnected.

What happens is told to a `FeedObserver` (the coordinator's metrics): each batch's outcome, replays, resyncs, and
the subscription's state (`connected`, `disconnected`, `stopped` once the instance left).
"""

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from motor.coordinator.registry import Target
from motor.kv.events import EventBatch, EventDecodeError, decode_message, replay_request
from motor.kv.index import KvIndex, Outcome

log = logging.getLogger(__name__)

REPLAY_TIMEOUT_S = 1.0
RECEIVE_HWM = 100_000


UNDECODABLE = "undecodable"  # a message's outcome beside the index's own (`Outcome`)
CONNECTION_EVENTS = {zmq.EVENT_CONNECTED: "connected", zmq.EVENT_DISCONNECTED: "disconnected"}


class FeedObserver(Protocol):
    def batch(self, instance: str, outcome: str) -> None:
        """A message arrived: what the index did with it (an `Outcome` value), or `undecodable`."""

    def replay(self, instance: str, complete: bool) -> None:
        """A replay was asked of the engine (on connect, on a gap); complete: it ended with its end marker."""

    def resync(self, instance: str) -> None:
        """A gap no replay could fill: the instance was forgotten, the index goes on from the next batch."""

    def feed_state(self, instance: str, state: str) -> None:
        """The subscription is `connected`, `disconnected` (not yet, or the publisher is gone) or `stopped`."""


class NoObserver:
    def batch(self, instance: str, outcome: str) -> None:
        pass

    def replay(self, instance: str, complete: bool) -> None:
        pass

    def resync(self, instance: str) -> None:
        pass

    def feed_state(self, instance: str, state: str) -> None:
        pass


@dataclass(frozen=True)
class FeedAddress:
    key: str  # the endpoint's target key: the index's instance name
    events: str
    replay: str | None


class EndpointFeed:
    def __init__(
        self, address: FeedAddress, index: KvIndex, context: zmq.asyncio.Context, observer: FeedObserver
    ) -> None:
        self.address = address
        self.index = index
        self.context = context
        self.observer = observer
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
        self.observer.feed_state(self.address.key, "stopped")

    async def _run(self) -> None:
        key = self.address.key
        sub = self.context.socket(zmq.SUB)
        sub.setsockopt(zmq.RCVHWM, RECEIVE_HWM)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.observer.feed_state(key, "disconnected")
        monitor = sub.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
        watching = asyncio.create_task(self._watch(monitor), name=f"kv-events-monitor-{key}")
        sub.connect(self.address.events)
        try:
            await self._replay(0)
            while True:
                frames = await sub.recv_multipart()
                try:
                    batch = decode_message(frames)
                except EventDecodeError as exc:
                    self.observer.batch(key, UNDECODABLE)
                    log.debug("kv events from %s: %s", key, exc)
                    continue
                if batch is not None:
                    await self._apply(batch)
        finally:
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching
            sub.disable_monitor()
            monitor.close(linger=0)
            sub.close(linger=0)

    async def _watch(self, monitor: zmq.asyncio.Socket) -> None:
        """The subscription's connection events, as the observer's feed states."""
        while True:
            event = parse_monitor_message(await monitor.recv_multipart())["event"]
            state = CONNECTION_EVENTS.get(event)
            if state is not None:
                self.observer.feed_state(self.address.key, state)
                if state == "disconnected":
                    log.warning(
                        "kv events: the publisher of %s went away (%s)", self.address.key, self.address.events
                    )

    async def _apply(self, batch: EventBatch) -> None:
        key = self.address.key
        outcome = self.index.apply(key, batch)
        self.observer.batch(key, outcome.value)
        if outcome is not Outcome.GAP:
            return
        expected = self.index.expected_sequence(key)
        replayed = expected is not None and await self._replay(expected)
        if replayed and self.index.apply(key, batch) is not Outcome.GAP:
            return
        self.observer.resync(key)
        self.index.resync(key)
        self.index.apply(key, batch)

    async def _replay(self, start: int) -> bool:
        """Apply the engine's buffered batches from `start`; False when the replay did not complete."""
        if self.address.replay is None:
            return False
        dealer = self.context.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(self.address.replay)
        try:
            await dealer.send_multipart([b"", replay_request(start)])
            while True:
                frames = await asyncio.wait_for(dealer.recv_multipart(), REPLAY_TIMEOUT_S)
                batch = decode_message(frames[1:])  # after the ROUTER's empty delimiter
                if batch is None:
                    self.observer.replay(self.address.key, True)
                    return True
                outcome = self.index.apply(self.address.key, batch)
                self.observer.batch(self.address.key, outcome.value)
                if outcome is Outcome.GAP:
                    self.observer.replay(self.address.key, False)
                    return False
        except (TimeoutError, EventDecodeError, zmq.ZMQError) as exc:
            self.observer.replay(self.address.key, False)
            log.debug("kv event replay from %s failed: %s", self.address.key, exc)
            return False
        finally:
            dealer.close(linger=0)


class KvEventSubscriber:
    """Keeps one feed per endpoint that publishes KV events, following the instance set."""

    def __init__(self, index: KvIndex, observer: FeedObserver | None = None) -> None:
        self.index = index
        self.observer = observer or NoObserver()
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
            feed = self._feeds[address] = EndpointFeed(address, self.index, self._context, self.observer)
            feed.start()

    def instances(self) -> list[str]:
        """The instances whose events this process follows."""
        return [address.key for address in self._feeds]

    async def close(self) -> None:
        feeds, self._feeds = list(self._feeds.values()), {}
        for feed in feeds:
            await feed.stop()
        for task in list(self._pending):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._context.term()
