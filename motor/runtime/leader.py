"""Leader election in etcd for a component that runs as an active/standby pair (pyMotor's `standby_config`).

The election is aetcd's lock: a key created in a transaction only while it does not exist, attached to a
lease of `lease_ttl` seconds. The process that created it leads and refreshes the lease every
`refresh_interval` seconds; the other one tries again as soon as the key is deleted (it watches for that) and
at least every `retry_interval` seconds. A leader that stops releases the key, so its standby takes over at
once; a leader that dies loses it when the lease expires, `lease_ttl` seconds later at most.

A leader steps down only when etcd says its lease is gone. While etcd cannot be reached it keeps leading: no
one else can take the lock then either, and stepping down would turn an etcd outage into an outage of the
component. Failed refreshes are retried with backoff and reported once `max_failures` failed in a row.
"""

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

import aetcd
import grpc

from motor.runtime.backoff import Backoff
from motor.runtime.waits import wait_event

log = logging.getLogger(__name__)

ETCD_ERRORS = (aetcd.ClientError, grpc.aio.AioRpcError, TimeoutError, OSError)
# While etcd does not answer a standby: how soon it asks again.
UNREACHABLE_RETRY = Backoff(initial_s=0.2, factor=2.0, cap_s=5.0, jitter=0.2)


@dataclass(frozen=True)
class ElectionSettings:
    lock_key: str
    lease_ttl: int
    refresh_interval: float
    retry_interval: float
    max_failures: int


class LeaderElection:
    def __init__(
        self, connect: Callable[[], aetcd.Client], settings: ElectionSettings, *, name: str, timeout_s: float
    ) -> None:
        """`connect` makes a new etcd client (a fresh connection after etcd came back)."""
        self._connect = connect
        self._settings = settings
        self._name = name
        self._timeout_s = timeout_s
        self._client: aetcd.Client | None = None
        self._lock: aetcd.Lock | None = None

    @property
    def leading(self) -> bool:
        return self._lock is not None

    async def acquire(self, stop: asyncio.Event) -> bool:
        """Wait until this process holds the lock (True) or `stop` is set (False)."""
        key = self._settings.lock_key.encode()
        failures = 0
        while not stop.is_set():
            try:
                attempt = asyncio.ensure_future(self._attempt(key))
                stopped = asyncio.ensure_future(stop.wait())
                await asyncio.wait({attempt, stopped}, return_when=asyncio.FIRST_COMPLETED)
                stopped.cancel()
                if not attempt.done():
                    attempt.cancel()
                    with contextlib.suppress(asyncio.CancelledError, *ETCD_ERRORS):
                        await attempt
                    return False
                lock = attempt.result()
                if lock is not None:
                    self._lock = lock
                    log.warning("%s: leading (holds %s in etcd)", self._name, self._settings.lock_key)
                    return True
                failures = 0
            except ETCD_ERRORS as exc:
                if failures == 0:
                    log.warning("%s: cannot reach etcd to elect a leader (%s); retrying", self._name, exc)
                await self._reconnect()
                await wait_event(stop, UNREACHABLE_RETRY.delay(failures))
                failures += 1
        return False

    async def _attempt(self, key: bytes) -> aetcd.Lock | None:
        """Try once to take the lock; while someone holds it, watch its key for up to `retry_interval` and return
        as soon as it is deleted (the holder released it or its lease expired), so the caller tries again at once.
        Watching, not polling: a standby that only retried every interval would race the restarted leader."""
        lock = self._etcd().lock(key, ttl=self._settings.lease_ttl)
        if await lock.acquire(timeout=0):
            return lock
        with contextlib.suppress(aetcd.WatchTimeoutError):
            await self._etcd().watch_once(
                key,
                timeout=self._settings.retry_interval,
                start_revision=lock.revision + 1,
                kind=aetcd.EventKind.DELETE,
            )
        return None

    async def hold(self) -> None:
        """Refresh the lease until etcd says it is gone; then return (the caller stops leading)."""
        lock = self._lock
        assert lock is not None, "hold() needs the lock: acquire() first"
        failures = 0
        while True:
            await asyncio.sleep(
                self._settings.refresh_interval if failures == 0 else self._retry_delay(failures)
            )
            try:
                async with asyncio.timeout(self._timeout_s):
                    reply = await lock.refresh()
            except ETCD_ERRORS as exc:
                failures += 1
                if failures == self._settings.max_failures:
                    log.error(
                        "%s: %d lease refreshes failed in a row (%s); still leading until etcd answers",
                        self._name,
                        failures,
                        exc,
                    )
                continue  # the client's gRPC channel reconnects by itself
            if failures >= self._settings.max_failures:
                log.warning("%s: etcd answers again", self._name)
            failures = 0
            if reply is None or reply.TTL <= 0:
                log.error("%s: the lease on %s expired; stepping down", self._name, self._settings.lock_key)
                self._lock = None
                return

    async def release(self) -> None:
        """Give the lock up (a stopping leader: its standby takes over at once)."""
        lock, self._lock = self._lock, None
        if lock is None:
            return
        try:
            async with asyncio.timeout(self._timeout_s):
                await lock.release()
                if lock.lease is not None:
                    await lock.lease.revoke()
        except ETCD_ERRORS as exc:
            log.warning(
                "%s: could not release %s (%s); it expires with its lease",
                self._name,
                self._settings.lock_key,
                exc,
            )

    async def close(self) -> None:
        if self._client is not None:
            with contextlib.suppress(*ETCD_ERRORS):
                await self._client.close()
            self._client = None

    def _etcd(self) -> aetcd.Client:
        if self._client is None:
            self._client = self._connect()
        return self._client

    async def _reconnect(self) -> None:
        """A fresh connection for the next attempt."""
        old, self._client = self._client, None
        if old is not None:
            with contextlib.suppress(*ETCD_ERRORS):
                await old.close()

    def _retry_delay(self, failures: int) -> float:
        return min(UNREACHABLE_RETRY.delay(failures - 1), self._settings.refresh_interval)
