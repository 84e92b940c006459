"""The simulator's deterministic tokenizer and chat template.

Words and punctuation map to ids by CRC32 into a fixed vocabulary; special tokens have fixed ids. Output ids
decode to pronounceable pseudo-words, so generated text is readable but carries no meaning.
"""

import re
import zlib
from collections.abc import Sequence

VOCAB_SIZE = 8192
EOS_ID = 0
IM_START_ID = 1
IM_END_ID = 2
SPECIAL_TOKENS = {"<|endoftext|>": EOS_ID, "<|im_start|>": IM_START_ID, "<|im_end|>": IM_END_ID}
FIRST_WORD_ID = len(SPECIAL_TOKENS)

_PIECES = re.compile(r"<\|[a-z_]+\|>|\w+|[^\w\s]")
_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
_SYLLABLES = [c + v for c in _CONSONANTS for v in _VOWELS]


def _pseudo_word(token_id: int) -> str:
    syllables = []
    value = token_id
    while True:
        value, digit = divmod(value, len(_SYLLABLES))
        syllables.append(_SYLLABLES[digit])
        if value == 0:
            return "".join(syllables)


_TEXT = ["" for _ in range(VOCAB_SIZE)]
for _token_id in range(FIRST_WORD_ID, VOCAB_SIZE):
    _TEXT[_token_id] = " " + _pseudo_word(_token_id)


def encode(text: str) -> list[int]:
    """Token ids of `text`: one per word or punctuation mark, special tokens by their literal form."""
    ids = []
    for piece in _PIECES.findall(text):
        special = SPECIAL_TOKENS.get(piece)
        if special is not None:
            ids.append(special)
        else:
            ids.append(FIRST_WORD_ID + zlib.crc32(piece.encode()) % (VOCAB_SIZE - FIRST_WORD_ID))
    return ids


def decode_token(token_id: int) -> str:
    """Text of one generated id; special tokens are skipped, as vLLM does by default."""
    return _TEXT[token_id]


def decode(token_ids: Sequence[int]) -> str:
    return "".join(_TEXT[token_id] for token_id in token_ids)


def render_chat(messages: Sequence[tuple[str, str]], *, add_generation_prompt: bool = True) -> str:
    """ChatML rendering of (role, content) pairs, ending with an open assistant turn by default."""
    parts = [f"<|im_start|>{role}\n{content}<|im_end|>\n" for role, content in messages]
    if add_generation_prompt:
        parts.append("<|im_start|>assistant\n")
    return "".join(parts)
