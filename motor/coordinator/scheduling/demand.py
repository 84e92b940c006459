"""What a request costs the endpoint that serves it, estimated without a tokenizer (see
`motor.coordinator.client_request`), its prompt's block hashes (computed once, on first use), and — under
policies that estimate it — how much of the prompt the shared KV pool probably holds already."""

from dataclasses import dataclass, field

from motor.coordinator.scheduling.kv_matches import KvMatches, KvPrediction
from motor.coordinator.scheduling.prefix import text_block_hashes, token_block_hashes


@dataclass(slots=True)
class Demand:
    prompt_tokens: int
    max_new_tokens: int
    prompt_text: str = ""
    prompt_token_ids: list[int] | None = None
    pool_hit_tokens: int | None = None  # set by `PoolHits` when the prefill leg is placed
    # kv_cache_affinity: the pool's leading blocks (asked before the prefill pick), the engine-form block hashes,
    # and the locator's answer within one pick (False: none usable, the leg goes by load)
    pool_blocks: int | None = None
    kv_hashes: list[int] | None = field(default=None, repr=False)
    kv_matches: KvMatches | bool | None = field(default=None, repr=False)
    kv_prediction: KvPrediction | None = None  # what the last pick expected of the endpoint it chose
    _hashes: list[int] | None = field(default=None, repr=False)

    def block_hashes(self, block_size: int) -> list[int]:
        if self._hashes is None:
            if self.prompt_token_ids is not None:
                self._hashes = token_block_hashes(self.prompt_token_ids, block_size)
            else:
                self._hashes = text_block_hashes(self.prompt_text, block_size)
        return self._hashes

    @property
    def prefill_tokens(self) -> int:
        """Prompt tokens a prefill has to compute: all of them, less the expected pool hits (at least one)."""
        return max(1, self.prompt_tokens - (self.pool_hit_tokens or 0))
