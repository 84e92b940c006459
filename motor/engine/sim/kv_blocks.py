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
    "block_hashes",
    "block_key",
    "chain_hash",
    "compute_kv",
    "context_digest",
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


def context_digest(block_digests: Sequence[int]) -> bytes:
    """The fingerprint of a sequence's whole KV, from its blocks' fingerprints in order."""
    return hashlib.blake2b(struct.pack(f"<{len(block_digests)}I", *block_digests), digest_size=16).digest()
