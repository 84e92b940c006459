from hypothesis import given
from hypothesis import strategies as st

from motor.engine.sim.kv_blocks import (
    SequenceContext,
    block_hashes,
    block_key,
    chain_hash,
    compute_kv,
    kv_digest,
    root_hash,
    shareable_block_count,
    transfer_key,
)

ROOT = root_hash("m", 4, 8)


def test_only_full_blocks_of_the_prompt_without_its_last_token_are_shareable() -> None:
    assert [shareable_block_count(n, 4) for n in (0, 1, 4, 5, 8, 9)] == [0, 0, 0, 1, 1, 2]


def test_hashes_chain_so_equal_hashes_mean_equal_prefixes() -> None:
    a = block_hashes([1, 2, 3, 4, 5, 6, 7, 8, 9], 4, ROOT)
    b = block_hashes([1, 2, 3, 4, 5, 6, 7, 0, 9], 4, ROOT)
    c = block_hashes([0, 2, 3, 4, 5, 6, 7, 8, 9], 4, ROOT)
    assert len(a) == 2
    assert a[0] == b[0] and a[1] != b[1]
    assert c[0] != a[0] and c[1] != a[1]
    assert a[1] == chain_hash(a[0], [5, 6, 7, 8])


def test_root_names_model_and_geometry() -> None:
    tokens = list(range(20))
    hashes = {
        block_hashes(tokens, 4, root_hash(model, size, width))[0].hex()
        for model, size, width in (("m", 4, 8), ("other", 4, 8), ("m", 4, 16))
    }
    assert len(hashes) == 3


def test_keys_are_namespaced_by_model() -> None:
    block_hash = bytes(range(16))
    assert block_key("tiny", block_hash) == f"motor-sim/tiny/kv/{block_hash.hex()}"
    assert transfer_key("tiny", "42") == "motor-sim/tiny/transfer/42"


def test_kv_bytes_are_deterministic_and_depend_on_the_block() -> None:
    first, second = block_hashes(list(range(9)), 4, ROOT)
    assert compute_kv(first, 5000) == compute_kv(first, 5000)
    assert len(compute_kv(first, 5000)) == 5000
    assert compute_kv(first, 64) != compute_kv(second, 64)
    assert compute_kv(first, 0) == b""


@given(st.integers(min_value=0, max_value=4095), st.integers(min_value=1, max_value=255))
def test_any_flipped_byte_changes_the_fingerprint(position: int, mask: int) -> None:
    kv = compute_kv(ROOT, 4096)
    damaged = bytearray(kv)
    damaged[position] ^= mask
    assert kv_digest(bytes(damaged)) != kv_digest(kv)


def _fresh_context(tokens: list[int], block_size: int = 4, kv_bytes_per_token: int = 8) -> SequenceContext:
    """The context a prefill of `tokens` computes (every block's KV computed from its hash)."""
    hashes = block_hashes(tokens, block_size, ROOT)
    digests = [kv_digest(compute_kv(h, block_size * kv_bytes_per_token)) for h in hashes]
    last = hashes[-1] if hashes else ROOT
    return SequenceContext(
        tokens, digests, last, block_size=block_size, kv_bytes_per_token=kv_bytes_per_token
    )


@given(st.lists(st.integers(3, 8191), min_size=1, max_size=20), st.lists(st.integers(3, 8191), max_size=20))
def test_a_context_extended_by_decoding_equals_a_fresh_prefill_of_the_whole_sequence(
    prompt: list[int], output: list[int]
) -> None:
    context = _fresh_context(prompt)
    for token in output:
        context.append(token)
    assert context.digest() == _fresh_context(prompt + output).digest()


def test_the_context_depends_on_every_token_and_its_order() -> None:
    digests = {
        _fresh_context(tokens).digest()
        for tokens in ([5, 6, 7, 8, 9, 10], [6, 5, 7, 8, 9, 10], [5, 6, 7, 8, 9])
    }
    assert len(digests) == 3
