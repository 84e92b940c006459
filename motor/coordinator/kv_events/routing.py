"""Everything kv_cache_affinity needs in one coordinator process: the prompt tokenizer, the block hasher, the KV
index fed by the engines' events, the locator the scorer asks, and (when configured) the pool's own answer.

Only this policy pays for tokenization: `prepare` runs once per request, before dispatch, and fills the demand's
token ids (exact prompt length too) and the pool's leading blocks.
"""

from typing import Any, Literal

from motor.coordinator.kv_events.locator import KvLocatorFromIndex
from motor.coordinator.kv_events.subscriber import KvEventSubscriber
from motor.coordinator.scheduling.demand import Demand
from motor.kv.block_hashes import DEFAULT_SEED, BlockHasher
from motor.kv.index import KvIndex
from motor.tokenize import PromptTokenizer


class KvRouting:
    def __init__(self, hasher: BlockHasher, tokenizer: PromptTokenizer) -> None:
        self.hasher = hasher
        self.tokenizer = tokenizer
        self.index = KvIndex(hasher.block_size)
        self.locator = KvLocatorFromIndex(self.index, hasher)
        self.subscriber = KvEventSubscriber(self.index)

    @classmethod
    def create(
        cls, *, block_size: int, hash_algorithm: str, hash_seed: str | None, tokenizer: PromptTokenizer
    ) -> "KvRouting":
        hasher = BlockHasher(block_size, hash_algorithm, DEFAULT_SEED if hash_seed is None else hash_seed)
        return cls(hasher, tokenizer)

    async def prepare(
        self, body: dict[str, Any], api: Literal["chat", "completions"], demand: Demand
    ) -> None:
        if demand.prompt_token_ids is None:
            ids = self.tokenizer.prompt_ids(body, api)
            if ids is None:
                return
            demand.prompt_token_ids = ids
            demand.prompt_tokens = len(ids)

    async def close(self) -> None:
        await self.subscriber.close()
