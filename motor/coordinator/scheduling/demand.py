"""What a request costs the endpoint that serves it, estimated without a tokenizer (see
`motor.coordinator.requests`), and its prompt's block hashes (computed once, on first use)."""

from dataclasses import dataclass, field

from motor.coordinator.scheduling.prefix import text_block_hashes, token_block_hashes


@dataclass(slots=True)
class Demand:
    prompt_tokens: int
    max_new_tokens: int
    prompt_text: str = ""
    prompt_token_ids: list[int] | None = None
    _hashes: list[int] | None = field(default=None, repr=False)

    def block_hashes(self, block_size: int) -> list[int]:
        if self._hashes is None:
            if self.prompt_token_ids is not None:
                self._hashes = token_block_hashes(self.prompt_token_ids, block_size)
            else:
                self._hashes = text_block_hashes(self.prompt_text, block_size)
        return self._hashes
