"""Prompt blocks, their chained hashes, pool keys and the simulator's synthetic KV bytes.

A block's hash covers its parent's hash and its own token ids, so equal hashes mean equal prefixes. The chain
starts from a root that names the model and the KV geometry: engines that disagree on block size or bytes
per token never share blocks. Like vLLM's prefix cache and store connectors, only full blocks of
`prompt[:-1]` are shareable; the rest (at least the last prompt token) is always computed locally.
"""

import hashlib
import struct
import zlib
from collections.abc import Sequence

from motor.kv.pool_keys import SIM_KEY_PREFIX as KEY_PREFIX
from motor.kv.pool_keys import shareable_block_count
from motor.kv.pool_keys import sim_block_hashes as block_hashes
from motor.kv.pool_keys import sim_block_key as block_key
from motor.kv.pool_keys import sim_chain_hash as chain_hash
from motor.kv.pool_keys import sim_root_hash as root_hash

__all__ = [
    "KEY_PREFIX",
    "SequenceContext",
    "block_hashes",
    "block_key",
    "chain_hash",
    "compute_kv",
    "kv_digest",
    "root_hash",
    "shareable_block_count",
    "transfer_key",
]

_PATTERN_BYTES = 1024


def transfer_key(model: str, transfer_id: str) -> str:
    """The pool key of the manifest a prefill writes for a transfer id (concurrent and decode_first)."""
    return f"{KEY_PREFIX}/{model}/transfer/{transfer_id}"


def compute_kv(block_hash: bytes, num_bytes: int) -> bytes:
    """The KV bytes a block "computes" to: a pattern expanded from its hash, so they depend on the whole prefix."""
    if num_bytes <= 0:
        return b""
    pattern = hashlib.shake_128(block_hash).digest(min(num_bytes, _PATTERN_BYTES))
    repeats, remainder = divmod(num_bytes, len(pattern))
    return pattern * repeats + pattern[:remainder]


def kv_digest(kv: bytes) -> int:
    """A fingerprint of KV bytes as held: any flipped byte changes it."""
    return zlib.crc32(kv)


class SequenceContext:
    """The fingerprint of everything a sequence holds (prompt and output so far) as decoding extends it.

    The digest after n output tokens equals that of a fresh prefill of prompt + those n tokens: full blocks of
    `tokens[:-1]` by their KV fingerprints, the rest as one tail "block" (what `_compute_prompt_kv` does for a
    prompt). So an output token, a function of this digest, depends on the whole context the way a model's
    does, and a request replayed with its output so far appended to the prompt continues exactly.
    """

    __slots__ = ("_block_bytes", "_blocks", "_bytes_per_token", "_parent", "_shared", "_size", "tokens")

    def __init__(
        self,
        tokens: Sequence[int],
        block_digests: Sequence[int],
        last_block_hash: bytes,
        *,
        block_size: int,
        kv_bytes_per_token: int,
    ) -> None:
        """`block_digests`: the fingerprints of the KV the engine holds for the shareable blocks of `tokens`
        (held bytes, so KV that arrived corrupted changes every later token); `last_block_hash`: the chain
        hash of the last of them (the root when there is none)."""
        self.tokens = list(tokens)
        self._size = block_size
        self._bytes_per_token = kv_bytes_per_token
        self._block_bytes = block_size * kv_bytes_per_token
        self._shared = len(block_digests) * block_size
        self._parent = last_block_hash
        self._blocks = hashlib.blake2b(digest_size=16)
        self._blocks.update(struct.pack(f"<{len(block_digests)}I", *block_digests))

    def digest(self) -> bytes:
        tail = self.tokens[self._shared :]
        tail_kv = compute_kv(chain_hash(self._parent, tail), len(tail) * self._bytes_per_token)
        whole = self._blocks.copy()
        whole.update(struct.pack("<I", kv_digest(tail_kv)))
        return whole.digest()

    def append(self, token: int) -> None:
        tokens = self.tokens
        tokens.append(token)
        if shareable_block_count(len(tokens), self._size) * self._size > self._shared:
            end = self._shared + self._size
            self._parent = chain_hash(self._parent, tokens[self._shared : end])
            self._blocks.update(struct.pack("<I", kv_digest(compute_kv(self._parent, self._block_bytes))))
            self._shared = end
