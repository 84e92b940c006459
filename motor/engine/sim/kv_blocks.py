"""Prompt blocks, their chained hashes, pool keys and the simulator's synthetic KV bytes.

A block's hash covers its parent's hash and its own token ids, so equal hashes mean equal prefixes. The chain
starts from a root that names the model and the KV geometry: engines that disagree on block size or bytes
per token never share blocks. Like vLLM's prefix cache and store connectors, only full blocks of
`prompt[:-1]` are shareable; the rest (at least the last prompt token) is always computed locally.
"""

import hashlib
import struct
import zlib
from array import array
from collections.abc import Sequence

KEY_PREFIX = "motor-sim"
_PATTERN_BYTES = 1024


def root_hash(model: str, block_size: int, kv_bytes_per_token: int) -> bytes:
    return hashlib.blake2b(f"{model}|{block_size}|{kv_bytes_per_token}".encode(), digest_size=16).digest()


def chain_hash(parent: bytes, token_ids: Sequence[int]) -> bytes:
    return hashlib.blake2b(parent + array("I", token_ids).tobytes(), digest_size=16).digest()


def shareable_block_count(num_prompt_tokens: int, block_size: int) -> int:
    return max(num_prompt_tokens - 1, 0) // block_size


def block_hashes(token_ids: Sequence[int], block_size: int, root: bytes) -> list[bytes]:
    """Chained hashes of the shareable full blocks of a prompt."""
    hashes = []
    parent = root
    for index in range(shareable_block_count(len(token_ids), block_size)):
        parent = chain_hash(parent, token_ids[index * block_size : (index + 1) * block_size])
        hashes.append(parent)
    return hashes


def block_key(model: str, block_hash: bytes) -> str:
    return f"{KEY_PREFIX}/{model}/kv/{block_hash.hex()}"


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


def context_digest(block_digests: Sequence[int]) -> bytes:
    """The fingerprint of a sequence's whole KV, from its blocks' fingerprints in order."""
    return hashlib.blake2b(struct.pack(f"<{len(block_digests)}I", *block_digests), digest_size=16).digest()
