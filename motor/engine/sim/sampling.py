"""Deterministic "sampling": each output token is a hash of the KV fingerprint, the sampling seed and the position.

Greedy requests (temperature 0) ignore the seed, as greedy decoding does; sampled requests use the request's
seed, or the engine's `--seed` when the request has none.
"""

import hashlib
import struct

from motor.tokenize.sim_vocab import EOS_ID, FIRST_WORD_ID, VOCAB_SIZE

GREEDY_SEED = 0
# Generated ids are EOS or ordinary words, never the chat-template markers.
_OUTPUT_CHOICES = VOCAB_SIZE - FIRST_WORD_ID + 1


def sampling_seed(temperature: float | None, request_seed: int | None, engine_seed: int) -> int:
    if temperature == 0:
        return GREEDY_SEED
    return request_seed if request_seed is not None else engine_seed


def _draw(context: bytes, seed: int, position: int, attempt: int) -> int:
    digest = hashlib.blake2b(context + struct.pack("<qII", seed, position, attempt), digest_size=8).digest()
    choice = int.from_bytes(digest, "little") % _OUTPUT_CHOICES
    return EOS_ID if choice == 0 else FIRST_WORD_ID + choice - 1


def output_token(context: bytes, seed: int, position: int, *, allow_eos: bool) -> int:
    """The token at `position` of the output; EOS is redrawn while it is not allowed (min_tokens)."""
    attempt = 0
    token = _draw(context, seed, position, attempt)
    while token == EOS_ID and not allow_eos:
        attempt += 1
        token = _draw(context, seed, position, attempt)
    return token
