"""How many leading blocks of a prompt the pool holds, asked of the pool itself, at a bounded cost.

One batch existence query per prompt covers its first `max_keys` keys (every rank's key of a block counts:
a block is usable only when all are present). Blocks are evicted independently, so presence is not strictly
prefix-closed: the answer is the count of leading blocks whose keys all exist. The native client blocks, so
the query runs on a small thread pool and is bounded by `timeout_s`; while the store client's outage breaker
is open the probe answers None without a thread or a round trip. None means "unknown", never an error.
"""

import asyncio
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from motor.kvstore.client import StoreClient
from motor.kvstore.errors import StoreError

log = logging.getLogger(__name__)


class KeyScheme(Protocol):
    def keys(self, block_hash: bytes) -> tuple[str, ...]: ...


class PoolPrefixProbe:
    def __init__(
        self,
        client: StoreClient,
        key_scheme: KeyScheme,
        *,
        timeout_s: float = 0.05,
        max_keys: int = 256,
        threads: int = 2,
    ) -> None:
        if max_keys < 1:
            raise ValueError(f"max_keys must be at least 1, not {max_keys}")
        self._client = client
        self._scheme = key_scheme
        self._timeout_s = timeout_s
        self._max_keys = max_keys
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="pool-prefix-probe")

    async def held_blocks(self, block_hashes: Sequence[bytes]) -> int | None:
        """Leading blocks of `block_hashes` held in the pool (capped by max_keys), None when it cannot say."""
        if not block_hashes:
            return 0
        if self._client.master_unavailable():
            return None
        keys: list[str] = []
        per_block: list[int] = []
        for block_hash in block_hashes:
            block_keys = self._scheme.keys(block_hash)
            if len(keys) + len(block_keys) > self._max_keys:
                break
            keys.extend(block_keys)
            per_block.append(len(block_keys))
        if not keys:
            return 0
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._executor, self._exists, keys)
        try:
            present = await asyncio.wait_for(future, self._timeout_s)
        except TimeoutError:
            return None
        if present is None:
            return None
        held = 0
        position = 0
        for count in per_block:
            if not all(present[position : position + count]):
                break
            position += count
            held += 1
        return held

    def _exists(self, keys: list[str]) -> list[bool] | None:
        try:
            return self._client.exists_batch(keys)
        except StoreError as error:
            log.debug("pool prefix probe: %s", error)
            return None

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
