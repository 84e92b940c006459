"""Everything kv_cache_affinity needs in one coordinator process: the prompt tokenizer, the block hasher, the KV
index fed by the engines' events, the locator the scorer asks, and (when configured) the pool's own answer.

Only this policy pays for tokenization: `prepare` runs once per request, before dispatch, and fills the demand's
token ids (exact prompt length too) and the pool's leading blocks.
"""

from collections.abc import Callable
from typing import Any, Literal

from motor.coordinator.kv_events.locator import KvLocatorFromIndex
from motor.coordinator.kv_events.pool_tier import PoolTier
from motor.coordinator.kv_events.subscriber import FeedObserver, KvEventSubscriber
from motor.coordinator.scheduling.demand import Demand
from motor.kv.block_hashes import DEFAULT_SEED, BlockHasher, event_hash
from motor.kv.index import TIERS, KvIndex
from motor.protocol.specs import KvIndexSpec
from motor.tokenize import PromptTokenizer


class KvRouting:
    def __init__(
        self,
        hasher: BlockHasher,
        tokenizer: PromptTokenizer,
        pool: PoolTier | None = None,
        pool_answered: Callable[[int | None], None] = lambda _blocks: None,
        feeds: FeedObserver | None = None,
    ) -> None:
        self.hasher = hasher
        self.tokenizer = tokenizer
        self.index = KvIndex(hasher.block_size)
        self.locator = KvLocatorFromIndex(self.index, hasher)
        self.subscriber = KvEventSubscriber(self.index, feeds)
        self.pool = pool
        self._pool_answered = pool_answered

    @classmethod
    def create(
        cls,
        spec: KvIndexSpec,
        tokenizer: PromptTokenizer,
        pool_answered: Callable[[int | None], None] = lambda _blocks: None,
        feeds: FeedObserver | None = None,
    ) -> "KvRouting":
        seed = DEFAULT_SEED if spec.hash_seed is None else spec.hash_seed
        hasher = BlockHasher(spec.block_size, spec.hash_algorithm, seed)
        pool = None if spec.pool is None else PoolTier(spec.pool, hasher)
        return cls(hasher, tokenizer, pool, pool_answered, feeds)

    def start(self) -> None:
        if self.pool is not None:
            self.pool.start()

    async def prepare(
        self, body: dict[str, Any], api: Literal["chat", "completions"], demand: Demand
    ) -> None:
        if demand.prompt_token_ids is None:
            ids = self.tokenizer.prompt_ids(body, api)
            if ids is None:
                return
            demand.prompt_token_ids = ids
            demand.prompt_tokens = len(ids)
        if self.pool is not None and demand.pool_blocks is None:
            digests = self.hasher.hashes(demand.prompt_token_ids)
            demand.kv_hashes = [event_hash(digest) for digest in digests]
            demand.pool_blocks = await self.pool.held_blocks(demand.prompt_token_ids, digests)
            self._pool_answered(demand.pool_blocks)

    def held_blocks(self) -> list[tuple[str, str, int]]:
        """(instance, tier, blocks) the index holds, for every instance followed."""
        return [
            (instance, tier, self.index.held_blocks(instance, tier))
            for instance in self.subscriber.instances()
            for tier in TIERS
        ]

    async def close(self) -> None:
        await self.subscriber.close()
        if self.pool is not None:
            await self.pool.close()
