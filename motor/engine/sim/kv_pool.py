"""The engine's view of the Mooncake pool: async calls on the synchronous store client, with the KV faults.

Store calls run on a small thread pool (shared by the virtual engines of a process, like the client) so the
event loop never blocks on the C++ client. Failures of the
store are logged and reported to the caller as "no KV" (the engine then recomputes), never raised.
"""

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import Any, TypeVar

from motor.engine.sim.faults import FaultInjector
from motor.engine.sim.metrics import EngineMetrics
from motor.pool.store import StoreClient, StoreError

log = logging.getLogger(__name__)

T = TypeVar("T")
_CORRUPT_BYTES = 8


def corrupt(kv: bytes) -> bytes:
    """The same block with its first bytes flipped, as a faulty link or a stale buffer would deliver it."""
    head = bytes(byte ^ 0xFF for byte in kv[:_CORRUPT_BYTES])
    return head + kv[_CORRUPT_BYTES:]


class KvPool:
    def __init__(
        self, client: StoreClient, *, executor: Executor, faults: FaultInjector, metrics: EngineMetrics
    ):
        self._client = client
        self._executor = executor
        self._faults = faults
        self._metrics = metrics

    async def _call(self, function: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, function, *args)

    async def present(self, keys: Sequence[str]) -> list[bool]:
        """Which of `keys` the pool holds; all False when the pool cannot be asked."""
        if not keys:
            return []
        try:
            return await self._call(self._client.exists_batch, list(keys))
        except StoreError as exc:
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
            values = await self._call(self._client.get_batch, list(keys))
        except StoreError as exc:
            self._metrics.kv_get_failures += 1
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
            await self._call(self._client.put_batch, items)
        except StoreError as exc:
            self._metrics.kv_put_failures += 1
            log.warning("writing %d KV blocks to the pool failed: %s", len(items), exc)
            return f"KV write to the pool failed: {exc}"
        self._metrics.kv_blocks_written += len(items)
        return None

    async def write_manifest(self, key: str, manifest: dict[str, Any]) -> bool:
        """Publish a transfer manifest (control data: the KV faults do not apply to it)."""
        try:
            await self._call(self._client.put, key, json.dumps(manifest).encode())
        except StoreError as exc:
            log.warning("writing transfer manifest %s failed: %s", key, exc)
            return False
        return True

    async def read_manifest(self, key: str) -> dict[str, Any] | None:
        try:
            raw = await self._call(self._client.get, key)
        except StoreError as exc:
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
