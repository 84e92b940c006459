"""Pushes instance changes to every coordinator's `POST /instances/refresh` until each is acknowledged.

One link per coordinator sends its events in order. When a push fails, the queued events are replaced by a
single `set` of the instances active at the time of the retry: it carries every change the lost events did,
so nothing is lost however long the coordinator was away. Every `coordinator_heartbeat_interval` each link
also sends a `set` (full reconciliation). Pushes carry `Authorization: Bearer <MOTOR_CONTROLLER_TOKEN>`: a
coordinator started with the token accepts refreshes only with it.
"""

import asyncio
import logging
import os
from collections import deque
from collections.abc import Callable

import aiohttp
from pydantic import ValidationError

from motor.controller.registry import Change
from motor.protocol import env as env_names
from motor.protocol.controller import CoordinatorLinkView, bearer
from motor.protocol.instances import Instance, InstanceEvent, RefreshResult
from motor.runtime.backoff import Backoff

log = logging.getLogger(__name__)

PUSH_TIMEOUT_S = 2.0
SETTLED_POLL_S = 0.01
# A link retries until its push is acknowledged: it never gives up.
PUSH_RETRY = Backoff(initial_s=0.2, factor=2.0, cap_s=2.0)


def event_for(change: Change) -> InstanceEvent | None:
    """`add` when an instance becomes routable (or changes while routable), `del` when it stops being so."""
    if change.after == "active" and (change.before != "active" or change.refreshed):
        return InstanceEvent(event="add", instances=[change.instance])
    if change.before == "active" and change.after != "active":
        return InstanceEvent(event="del", instances=[change.instance])
    return None


class CoordinatorLink:
    def __init__(
        self,
        url: str,
        snapshot: Callable[[], list[Instance]],
        session: aiohttp.ClientSession,
        headers: dict[str, str],
    ) -> None:
        self.url = url.rstrip("/")
        self._snapshot = snapshot
        self._session = session
        self._headers = headers
        self._events: deque[InstanceEvent] = deque()
        self._needs_set = False
        self._wake = asyncio.Event()
        self._acknowledged = 0
        self._last_error: str | None = None
        self._version: int | None = None

    def send(self, event: InstanceEvent) -> None:
        self._events.append(event)
        self._wake.set()

    def reconcile(self) -> None:
        self._needs_set = True
        self._wake.set()

    @property
    def pending(self) -> bool:
        """Events (or a `set`) not yet acknowledged by the coordinator."""
        return self._needs_set or bool(self._events)

    def view(self) -> CoordinatorLinkView:
        return CoordinatorLinkView(
            url=self.url,
            acknowledged_events=self._acknowledged,
            pending=self.pending,
            last_error=self._last_error,
            version=self._version,
        )

    async def run(self) -> None:
        failures = 0
        while True:
            if not self._needs_set and not self._events:
                self._wake.clear()
                await self._wake.wait()
            if self._needs_set:
                self._events.clear()
                event = InstanceEvent(event="set", instances=self._snapshot())
            else:
                event = self._events[0]
            if await self._push(event):
                if event.event == "set":
                    self._needs_set = False
                else:
                    self._events.popleft()
                failures = 0
            else:
                self._needs_set = True
                await asyncio.sleep(PUSH_RETRY.delay(failures))
                failures += 1

    async def _push(self, event: InstanceEvent) -> bool:
        try:
            async with self._session.post(
                f"{self.url}/instances/refresh",
                json=event.model_dump(mode="json"),
                headers=self._headers,
                timeout=aiohttp.ClientTimeout(total=PUSH_TIMEOUT_S),
            ) as response:
                body = await response.read()
                if response.status != 200:
                    raise RuntimeError(f"HTTP {response.status}: {body[:200].decode(errors='replace')}")
                result = RefreshResult.model_validate_json(body)
        except (aiohttp.ClientError, TimeoutError, RuntimeError, ValidationError) as exc:
            error = f"{type(exc).__name__}: {exc}"
            if error != self._last_error:
                log.warning(
                    "push %s to %s failed (%s); retrying until acknowledged", event.event, self.url, error
                )
            self._last_error = error
            return False
        if self._last_error is not None:
            log.info("coordinator %s acknowledged %s again", self.url, event.event)
        self._last_error = None
        self._acknowledged += 1
        self._version = result.version
        return True


class EventPusher:
    def __init__(
        self,
        urls: list[str],
        snapshot: Callable[[], list[Instance]],
        session: aiohttp.ClientSession,
        token: str | None = None,
    ) -> None:
        """`token`: the shared controller token (default: MOTOR_CONTROLLER_TOKEN from the environment)."""
        token = token if token is not None else os.environ.get(env_names.CONTROLLER_TOKEN, "")
        headers = bearer(token) if token else {}
        self.links = [CoordinatorLink(url, snapshot, session, headers) for url in urls]

    def publish(self, change: Change) -> None:
        event = event_for(change)
        if event is None:
            return
        log.info("instance %s %s → %s: push %s", change.instance.id, change.before, change.after, event.event)
        for link in self.links:
            link.send(event)

    def reconcile(self) -> None:
        for link in self.links:
            link.reconcile()

    async def settled(self, timeout_s: float) -> bool:
        """Wait until every coordinator acknowledged what was published so far: True, or False after
        `timeout_s` (a coordinator that does not answer)."""
        try:
            async with asyncio.timeout(timeout_s):
                while any(link.pending for link in self.links):
                    await asyncio.sleep(SETTLED_POLL_S)
        except TimeoutError:
            return False
        return True

    async def run(self, interval: float) -> None:
        """Run every link, asking each for a full `set` right away and then every `interval` seconds."""
        async with asyncio.TaskGroup() as group:
            for link in self.links:
                group.create_task(link.run())
            while True:
                self.reconcile()
                await asyncio.sleep(interval)
