"""The engine's view of the Mooncake pool: async calls on the synchronous store client, with the KV faults.

Store calls run on a small thread pool (shared by the virtual engines of a process, like the client) so the
event loop never blocks on the C++ client. Failures of the store are logged and reported to the caller as
"no KV" (the engine then recomputes), never raised.

A pool is a cache: losing it costs hit ratio, never availability. `StoreLink` (one per process) holds the
store client; an engine that starts while the master is down serves without the pool and connects in the
background. While the master is gone the client's outage breaker refuses calls at once, and `KvPool` does not
even hand them to a thread then; every call is also bounded by CALL_TIMEOUT_S, so a request never waits for a
store call stuck in Mooncake's reconnect loop.
"""

import asyncio
import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from typing import Any, TypeVar

from motor.engine.sim.faults import FaultInjector
from motor.engine.sim.metrics import EngineMetrics, PoolLinkView
from motor.kvstore.client import StoreClient
from motor.kvstore.errors import StoreError, StoreUnavailable
from motor.runtime.backoff import Backoff

log = logging.getLogger(__name__)

T = TypeVar("T")
_CORRUPT_BYTES = 8
# A store call the engine waits for longer than this is treated as a miss (the call itself may go on).
CALL_TIMEOUT_S = 2.0
CONNECT_RETRY = Backoff(initial_s=0.5, factor=2.0, cap_s=5.0, jitter=0.2)


class StoreLink:
    """The process's store client, or None while it could not connect yet (then it keeps trying)."""

    def __init__(self, store_config: Mapping[str, Any], *, local_hostname: str) -> None:
        self._store_config = dict(store_config)
        self._local_hostname = local_hostname
        self.client: StoreClient | None = None
        self._closing = threading.Event()
        self._connector: threading.Thread | None = None

    def connect(self) -> None:
        """Connect now; when the master does not accept connections, keep trying in a background thread."""
        try:
            self.client = StoreClient.connect(self._store_config, local_hostname=self._local_hostname)
        except StoreUnavailable as exc:
            log.warning("starting without the KV pool (connecting in the background): %s", exc)
            self._connector = threading.Thread(
                target=self._keep_connecting, name="sim-store-connect", daemon=True
            )
            self._connector.start()

    def unavailable(self) -> bool:
        """True while a store call would be refused without reaching the master."""
        client = self.client
        return client is None or client.master_unavailable()

    def view(self) -> PoolLinkView:
        client = self.client
        if client is None:
            return PoolLinkView(connected=False, up=False, outages=0, refused_calls=0, down_seconds=0.0)
        outage = client.outage()
        return PoolLinkView(True, outage.up, outage.outages, outage.refused_calls, outage.down_seconds)

    def close(self) -> None:
        self._closing.set()
        if self.client is not None:
            self.client.close()

    def _keep_connecting(self) -> None:
        attempt = 0
        while not self._closing.wait(CONNECT_RETRY.delay(attempt)):
            attempt += 1
            try:
                client = StoreClient.connect(self._store_config, local_hostname=self._local_hostname)
            except StoreUnavailable as exc:
                log.debug("KV pool still unavailable: %s", exc)
                continue
            if self._closing.is_set():
                client.close()
                return
            self.client = client
            log.warning("KV pool connected: mooncake_master at %s", client.master_address)
            return


def corrupt(kv: bytes) -> bytes:
    """The same block with its first bytes flipped, as a faulty link or a stale buffer would deliver it."""
    head = bytes(byte ^ 0xFF for byte in kv[:_CORRUPT_BYTES])
    return head + kv[_CORRUPT_BYTES:]


class KvPool:
    def __init__(self, link: StoreLink, *, executor: Executor, faults: FaultInjector, metrics: EngineMetrics):
        self._link = link
        self._executor = executor
        self._faults = faults
        self._metrics = metrics

    def unavailable(self) -> bool:
        return self._link.unavailable()

    async def _call(self, method: Callable[[StoreClient], Callable[..., T]], *args: Any) -> T:
        """`method(client)(*args)` on a store thread; StoreUnavailable at once during an outage, and after
        CALL_TIMEOUT_S when the call is stuck."""
        client = self._link.client
        if client is None or client.master_unavailable():
            raise StoreUnavailable("the KV pool is unavailable (its master did not answer earlier calls)")
        call = asyncio.get_running_loop().run_in_executor(self._executor, method(client), *args)
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancellation (the client went away)
        # that arrives just as the call completes, and the request would then wait out its KV timeout.
        try:
            async with asyncio.timeout(CALL_TIMEOUT_S):
                return await call
        except TimeoutError:
            raise StoreUnavailable(f"the KV pool did not answer within {CALL_TIMEOUT_S:g} s") from None

    async def present(self, keys: Sequence[str]) -> list[bool]:
        """Which of `keys` the pool holds; all False when the pool cannot be asked."""
        if not keys:
            return []
        try:
            return await self._call(lambda c: c.exists_batch, list(keys))
        except StoreError as exc:
            self._count_unavailable(exc)
            log.warning("pool lookup of %d blocks failed, treating them as absent: %s", len(keys), exc)
            return [False] * len(keys)

    async def fetch(self, keys: Sequence[str]) -> list[bytes | None]:
        """The blocks' bytes (None where missing), through the kv_get_fail and kv_corrupt faults."""
        if not keys:
            return []
        faults = self._faults.faults
        if faults.kv_get_fail:
            self._metrics.kv_get_failures += 1
            self._metrics.faults_fired["kv_get_fail"] += 1
            log.warning("fault kv_get_fail: reading %d KV blocks fails", len(keys))
            return [None] * len(keys)
        try:
            values = await self._call(lambda c: c.get_batch, list(keys))
        except StoreError as exc:
            self._metrics.kv_get_failures += 1
            self._count_unavailable(exc)
            log.warning("reading %d KV blocks from the pool failed: %s", len(keys), exc)
            return [None] * len(keys)
        self._metrics.kv_blocks_fetched += sum(value is not None for value in values)
        if faults.kv_corrupt:
            self._metrics.faults_fired["kv_corrupt"] += 1
            log.warning("fault kv_corrupt: flipping bytes in %d fetched KV blocks", len(values))
            return [None if value is None else corrupt(value) for value in values]
        return values

    async def write(self, items: dict[str, bytes]) -> str | None:
        """Store KV blocks; returns None on success, else why they could not be written."""
        if not items:
            return None
        if self._faults.faults.kv_put_fail:
            self._metrics.kv_put_failures += 1
            self._metrics.faults_fired["kv_put_fail"] += 1
            return "KV write to the pool failed (injected fault kv_put_fail)"
        try:
            await self._call(lambda c: c.put_batch, items)
        except StoreError as exc:
            self._metrics.kv_put_failures += 1
            self._count_unavailable(exc)
            log.warning("writing %d KV blocks to the pool failed: %s", len(items), exc)
            return f"KV write to the pool failed: {exc}"
        self._metrics.kv_blocks_written += len(items)
        return None

    async def write_manifest(self, key: str, manifest: dict[str, Any]) -> bool:
        """Publish a transfer manifest (control data: the KV faults do not apply to it)."""
        try:
            await self._call(lambda c: c.put, key, json.dumps(manifest).encode())
        except StoreError as exc:
            self._count_unavailable(exc)
            log.warning("writing transfer manifest %s failed: %s", key, exc)
            return False
        return True

    async def read_manifest(self, key: str) -> dict[str, Any] | None:
        try:
            raw = await self._call(lambda c: c.get, key)
        except StoreError as exc:
            self._count_unavailable(exc)
            log.debug("reading transfer manifest %s failed: %s", key, exc)
            return None
        if raw is None:
            return None
        try:
            manifest = json.loads(raw)
        except ValueError:
            log.warning("transfer manifest %s is not JSON; ignoring it", key)
            return None
        return manifest if isinstance(manifest, dict) else None

    def _count_unavailable(self, exc: StoreError) -> None:
        if isinstance(exc, StoreUnavailable):
            self._metrics.kv_pool_unavailable += 1
