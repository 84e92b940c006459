"""Prefix-cache block hashes of a prompt, as the vLLM engines motor launches compute them.

A vLLM engine (0.32, v1 KV cache manager) hashes every full block of `block_size` prompt tokens as
`H((parent, tuple(block_tokens), extra_keys))`, chained from the first block, whose parent is a root hash
`H(seed)`. `H` is the engine's `--prefix-caching-hash-algo`: `sha256` (its default) hashes the object's pickle
(highest protocol), `sha256_cbor` its canonical CBOR encoding. The seed is the engine's `PYTHONHASHSEED` when set,
else the fixed string vLLM uses for cryptographic hashes — so with sha256 two engines, and motor, agree on every
hash without sharing a secret. `extra_keys` is None for a plain text prompt (no LoRA adapter, no `cache_salt`, no
multimodal input), the only case motor hashes; other prompts get no hashes and are routed by load.

vLLM's KV events carry a block's hash as the low 64 bits of the digest, read big-endian
(`VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`, on by default): `event_hash` turns a digest into that form.
"""

import hashlib
import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

DEFAULT_ALGORITHM = "sha256"
# vLLM's root seed for cryptographic hashes when PYTHONHASHSEED is not set.
DEFAULT_SEED = "vllm-none-hash"
EVENT_HASH_MASK = (1 << 64) - 1


def _sha256_pickle(value: Any) -> bytes:
    return hashlib.sha256(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def _sha256_cbor(value: Any) -> bytes:
    import cbor2  # only engines configured for CBOR hashing need it; vLLM depends on it

    return hashlib.sha256(cbor2.dumps(value, canonical=True)).digest()


ALGORITHMS: dict[str, Callable[[Any], bytes]] = {"sha256": _sha256_pickle, "sha256_cbor": _sha256_cbor}


def event_hash(digest: bytes) -> int:
    """A block hash as vLLM's KV events publish it."""
    return int.from_bytes(digest, "big") & EVENT_HASH_MASK


@dataclass(frozen=True)
class BlockHasher:
    """Hashes the full blocks of a token sequence the way one engine configuration does."""

    block_size: int
    algorithm: str = DEFAULT_ALGORITHM
    seed: str = DEFAULT_SEED
    _hash: Callable[[Any], bytes] = field(init=False, repr=False, compare=False)
    _root: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.block_size < 1:
            raise ValueError(f"block_size must be at least 1, not {self.block_size}")
        try:
            hash_fn = ALGORITHMS[self.algorithm]
        except KeyError:
            raise ValueError(
                f"motor cannot reproduce prefix-caching hash algorithm {self.algorithm!r} "
                f"(it can: {', '.join(sorted(ALGORITHMS))})"
            ) from None
        object.__setattr__(self, "_hash", hash_fn)
        object.__setattr__(self, "_root", hash_fn(self.seed))

    def hashes(self, token_ids: Sequence[int]) -> list[bytes]:
        """The digest of every full block of `token_ids`, first block first (a partial last block has none)."""
        size = self.block_size
        parent = self._root
        digests = []
        for start in range(0, len(token_ids) - size + 1, size):
            parent = self._hash((parent, tuple(token_ids[start : start + size]), None))
            digests.append(parent)
        return digests

    def event_hashes(self, token_ids: Sequence[int]) -> list[int]:
        """`hashes` in the form vLLM's KV events use."""
        return [event_hash(digest) for digest in self.hashes(token_ids)]
