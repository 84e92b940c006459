"""kv_cache_affinity's pool tier: how many leading blocks of a prompt the shared KV pool holds, asked of the pool.

The keys are the ones the prefill/union engines write (motor.kv.pool_keys: the simulator's, or vLLM's
MooncakeStoreConnector's, whose hashes are the engine's own prefix-cache digests). Each coordinator worker keeps
one store client that contributes no memory to the pool. It connects in the background, and tries again while it
cannot, so a pool that is down at start or later only makes the answer unknown (None): routing then goes on the
engines' own tiers, never fails.
"""

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence

from motor.kv.block_hashes import BlockHasher
from motor.kv.pool_keys import SimKeys, VllmMooncakeStoreKeys, sim_block_hashes, sim_root_hash
from motor.kvstore.client import StoreClient
from motor.kvstore.errors import StoreError
from motor.kvstore.prefix_probe import KeyScheme, PoolPrefixProbe
from motor.protocol.specs import PoolTierSpec

log = logging.getLogger(__name__)

FIRST_RETRY_S = 1.0
MAX_RETRY_S = 30.0

# the pool's block hashes of a prompt, from its token ids and the engine's prefix-cache digests
PoolHashes = Callable[[Sequence[int], Sequence[bytes]], Sequence[bytes]]


def pool_hashes(spec: PoolTierSpec, hasher: BlockHasher) -> tuple[PoolHashes, KeyScheme]:
    if spec.key_scheme == "motor-sim":
        block_size = hasher.block_size
        root = sim_root_hash(spec.model, block_size, spec.kv_bytes_per_token)
        return (lambda ids, _digests: sim_block_hashes(ids, block_size, root)), SimKeys(spec.model)
    return (lambda _ids, digests: digests), VllmMooncakeStoreKeys(spec.model, key_tp_ranks=spec.key_tp_ranks)


class PoolTier:
    def __init__(self, spec: PoolTierSpec, hasher: BlockHasher) -> None:
        self._store_config = spec.store_config
        self._hashes, self._keys = pool_hashes(spec, hasher)
        self._client: StoreClient | None = None
        self._probe: PoolPrefixProbe | None = None
        self._connecting: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._connecting = asyncio.create_task(self._connect())

    async def held_blocks(self, token_ids: Sequence[int], digests: Sequence[bytes]) -> int | None:
        """Leading blocks of the prompt in the pool; None while the pool cannot say."""
        if self._probe is None:
            return None
        return await self._probe.held_blocks(self._hashes(token_ids, digests))

    async def close(self) -> None:
        if self._connecting is not None:
            self._connecting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._connecting
        if self._probe is not None:
            self._probe.close()
        if self._client is not None:
            await asyncio.to_thread(self._client.close)

    async def _connect(self) -> None:
        delay = FIRST_RETRY_S
        while True:
            try:
                client = await asyncio.to_thread(StoreClient.connect, self._store_config)
            except StoreError as error:
                log.warning(
                    "kv_cache_affinity: the KV pool cannot be asked yet (%s); routing on the engines' own "
                    "tiers, trying again in %g s",
                    error,
                    delay,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_RETRY_S)
                continue
            self._client = client
            self._probe = PoolPrefixProbe(client, self._keys)
            log.info(
                "kv_cache_affinity: asking the KV pool at %s what it holds of each prompt",
                client.master_address,
            )
            return
