import time

from motor.kv.pool_keys import SimKeys, sim_block_hashes, sim_root_hash
from motor.kvstore.client import StoreClient
from motor.kvstore.prefix_probe import PoolPrefixProbe
from tests.fixtures.pool import RunningPool


async def test_probe_counts_leading_held_blocks_and_answers_none_when_master_is_gone(
    mooncake_master: RunningPool,
) -> None:
    scheme = SimKeys("probe-model")
    hashes = sim_block_hashes(list(range(8 * 16 + 1)), 16, sim_root_hash("probe-model", 16, 8))
    with StoreClient.connect(mooncake_master.store_config) as client:
        probe = PoolPrefixProbe(client, scheme, timeout_s=0.3, max_keys=64)
        assert await probe.held_blocks(hashes) == 0
        client.put_batch({scheme.keys(h)[0]: b"kv" for h in hashes[:5]})
        client.put(scheme.keys(hashes[6])[0], b"kv")  # after a gap: not a leading block
        assert await probe.held_blocks(hashes) == 5
        assert await PoolPrefixProbe(client, scheme, max_keys=3, timeout_s=0.3).held_blocks(hashes) == 3
        mooncake_master.master.stop()
        for _ in range(3):
            start = time.monotonic()
            assert await probe.held_blocks(hashes) is None
            assert time.monotonic() - start < 0.5
        probe.close()
