from motor.engine.sim import kv_blocks
from motor.kv.block_hashes import BlockHasher
from motor.kv.pool_keys import SimKeys, VllmMooncakeStoreKeys, sim_block_hashes, sim_root_hash


def test_sim_keys_are_the_simulator_keys() -> None:
    root = sim_root_hash("m", 4, 16)
    hashes = sim_block_hashes(list(range(13)), 4, root)
    assert hashes == kv_blocks.block_hashes(list(range(13)), 4, kv_blocks.root_hash("m", 4, 16))
    assert len(hashes) == 3
    assert SimKeys("m").keys(hashes[0]) == (kv_blocks.block_key("m", hashes[0]),)


def test_vllm_keys_match_vllms_own_pool_key() -> None:
    from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store.data import KeyMetadata, PoolKey

    digest = BlockHasher(16).hashes(list(range(16)))[0]
    scheme = VllmMooncakeStoreKeys("/models/Qwen3-0.6B/", key_tp_ranks=2, pp_size=1)
    expected = tuple(
        PoolKey(KeyMetadata("Qwen3-0.6B", tp, 0, 0, 0), digest.hex()).to_string() for tp in range(2)
    )
    assert scheme.keys(digest) == expected
    prefixed = VllmMooncakeStoreKeys("Qwen3-0.6B", cache_prefix="dep1")
    meta = KeyMetadata("Qwen3-0.6B", 0, 0, 0, 0, cache_prefix="dep1")
    assert prefixed.keys(digest) == (PoolKey(meta, digest.hex()).to_string(),)
