"""motor's prefix-cache block hashes (motor/kv/block_hashes.py) against the installed vLLM's own request block
hasher: the same digests for every algorithm motor claims, block size and seed, and the same event form."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from motor.kv.block_hashes import DEFAULT_SEED, BlockHasher, event_hash
from tests.installs import importable, needs_vllm

pytestmark = needs_vllm
if importable("vllm"):
    from vllm import sampling_params as sampling
    from vllm.utils import hashing as vllm_hashing
    from vllm.v1 import request as vllm_request
    from vllm.v1.core import kv_cache_utils


def vllm_block_hashes(token_ids: list[int], block_size: int, algorithm: str) -> list[bytes]:
    """The digests a vLLM engine computes for a plain text request (its own Request and block hasher)."""
    hash_fn = vllm_hashing.get_hash_fn_by_name(algorithm)
    kv_cache_utils.init_none_hash(hash_fn)
    request = vllm_request.Request(
        request_id="r",
        prompt_token_ids=list(token_ids),
        sampling_params=sampling.SamplingParams(max_tokens=1),
        pooling_params=None,
        block_hasher=kv_cache_utils.get_request_block_hasher(block_size, hash_fn),
    )
    return [bytes(digest) for digest in request.block_hashes]


@pytest.fixture(params=[None, "0", "4242"], ids=["no PYTHONHASHSEED", "seed 0", "seed 4242"])
def seed(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param is None:
        monkeypatch.delenv("PYTHONHASHSEED", raising=False)
        return DEFAULT_SEED
    monkeypatch.setenv("PYTHONHASHSEED", request.param)
    return request.param


@pytest.mark.parametrize("algorithm", ["sha256", "sha256_cbor"])
@pytest.mark.parametrize("block_size", [1, 16, 128])
def test_digests_equal_the_engines(algorithm: str, block_size: int, seed: str) -> None:
    tokens = [(i * 7919) % 151_000 for i in range(1000)]
    expected = vllm_block_hashes(tokens, block_size, algorithm)
    assert len(expected) == 1000 // block_size
    assert BlockHasher(block_size, algorithm, seed).hashes(tokens) == expected


@settings(max_examples=200, deadline=None)
@given(tokens=st.lists(st.integers(0, 2**31 - 1), max_size=80), block_size=st.sampled_from([1, 2, 4, 16]))
def test_digests_equal_the_engines_for_any_prompt(tokens: list[int], block_size: int) -> None:
    assert BlockHasher(block_size).hashes(tokens) == vllm_block_hashes(tokens, block_size, "sha256")


def test_event_hashes_are_the_form_vllm_publishes() -> None:
    digests = BlockHasher(16).hashes(list(range(64)))
    assert [event_hash(d) for d in digests] == [kv_cache_utils.maybe_convert_block_hash(d) for d in digests]


def test_a_prefix_shares_its_blocks_and_a_change_breaks_the_chain() -> None:
    hasher = BlockHasher(4)
    base = hasher.hashes(list(range(16)))
    assert hasher.hashes([*range(16), 99, 98]) == base  # a partial last block adds nothing
    changed = hasher.hashes([0, 1, 2, 3, 4, 5, 6, 77, *range(8, 16)])
    assert changed[0] == base[0] and all(a != b for a, b in zip(changed[1:], base[1:], strict=True))


def test_what_motor_cannot_reproduce_is_refused() -> None:
    with pytest.raises(ValueError, match="xxhash"):
        BlockHasher(16, "xxhash")
    with pytest.raises(ValueError, match="block_size"):
        BlockHasher(0)
