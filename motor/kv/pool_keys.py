"""The pool keys KV writers put per prompt block, computable from the prompt alone (pure functions).

Two writers are covered:

- motor's simulator engine: blocks chained with blake2b from a root naming the model and the KV geometry,
  keyed `motor-sim/<model>/kv/<hash hex>`; only full blocks of `prompt[:-1]` are written.
- vLLM 0.32's MooncakeStoreConnector (vllm/distributed/kv_transfer/kv_connector/v1/mooncake/store/data.py,
  `PoolKey.build_prefix` / `build_key_string`), in its default rank-local layout:
  `[<cache_prefix>@]<model basename><store_namespace>@tp_rank:<t>@pcp<c>@dcp<d>@pp_rank:<p>@group:<g>@<hash hex>`,
  where the hash is the engine's prefix-cache block hash (motor.kv.block_hashes) when block_size equals the
  hash block size. A block is loadable only when every rank's object exists, so a scheme yields all of them.
"""

import hashlib
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

SIM_KEY_PREFIX = "motor-sim"


def sim_root_hash(model: str, block_size: int, kv_bytes_per_token: int) -> bytes:
    return hashlib.blake2b(f"{model}|{block_size}|{kv_bytes_per_token}".encode(), digest_size=16).digest()


def sim_chain_hash(parent: bytes, token_ids: Sequence[int]) -> bytes:
    return hashlib.blake2b(parent + array("I", token_ids).tobytes(), digest_size=16).digest()


def shareable_block_count(num_prompt_tokens: int, block_size: int) -> int:
    return max(num_prompt_tokens - 1, 0) // block_size


def sim_block_hashes(token_ids: Sequence[int], block_size: int, root: bytes) -> list[bytes]:
    """Chained hashes of the shareable full blocks of a prompt."""
    hashes = []
    parent = root
    for index in range(shareable_block_count(len(token_ids), block_size)):
        parent = sim_chain_hash(parent, token_ids[index * block_size : (index + 1) * block_size])
        hashes.append(parent)
    return hashes


def sim_block_key(model: str, block_hash: bytes) -> str:
    return f"{SIM_KEY_PREFIX}/{model}/kv/{block_hash.hex()}"


@dataclass(frozen=True)
class SimKeys:
    """The simulator's key of a block: one object per block."""

    model: str

    def keys(self, block_hash: bytes) -> tuple[str, ...]:
        return (sim_block_key(self.model, block_hash),)


def vllm_model_name(model: str) -> str:
    """The model name vLLM's store connector puts in its keys: the last path component of `--model`."""
    return model.rstrip("/").split("/")[-1]


@dataclass(frozen=True)
class VllmMooncakeStoreKeys:
    """vLLM's MooncakeStoreConnector keys of a block in the rank-local layout, one per rank namespace.

    `key_tp_ranks` is how many distinct tp_rank values the keys carry: `tp_size // (tp_size // num_kv_heads)`
    for GQA when tp_size exceeds num_kv_heads (replicas share a key), 1 for MLA, else tp_size. `store_namespace`
    is empty unless the connector's `store_tp_size` / `enable_store_tp_lcm` options are set.
    """

    model: str
    key_tp_ranks: int = 1
    pcp_size: int = 1
    pp_size: int = 1
    group_id: int = 0
    cache_prefix: str = ""
    store_namespace: str = ""

    def __post_init__(self) -> None:
        name = f"{self.cache_prefix}@" if self.cache_prefix else ""
        name += vllm_model_name(self.model) + self.store_namespace
        prefixes = tuple(
            f"{name}@tp_rank:{tp}@pcp{pcp}@dcp0@pp_rank:{pp}@group:{self.group_id}@"
            for pcp in range(self.pcp_size)
            for tp in range(self.key_tp_ranks)
            for pp in range(self.pp_size)
        )
        object.__setattr__(self, "_prefixes", prefixes)

    def keys(self, block_hash: bytes) -> tuple[str, ...]:
        hex_hash = block_hash.hex()
        return tuple(prefix + hex_hash for prefix in self._prefixes)  # type: ignore[attr-defined]
