"""µs per PoolPrefixProbe.held_blocks call for a 64-block prompt against a local mooncake_master."""

import asyncio
import tempfile
import time
from pathlib import Path

from motor.kv.pool import KvCachePoolConfig
from motor.kv.pool_keys import SimKeys, sim_block_hashes, sim_root_hash
from motor.kvstore.client import StoreClient
from motor.kvstore.prefix_probe import PoolPrefixProbe
from motor.pool.master import MooncakeMaster
from motor.runtime.net import free_local_ports


async def measure(client: StoreClient, rounds: int) -> float:
    scheme = SimKeys("bench")
    hashes = sim_block_hashes(list(range(64 * 16 + 1)), 16, sim_root_hash("bench", 16, 8))
    client.put_batch({scheme.keys(h)[0]: b"kv" for h in hashes[:48]})
    probe = PoolPrefixProbe(client, scheme, timeout_s=1.0, max_keys=64)
    assert await probe.held_blocks(hashes) == 48
    start = time.perf_counter()
    for _ in range(rounds):
        await probe.held_blocks(hashes)
    elapsed = time.perf_counter() - start
    probe.close()
    return elapsed / rounds * 1e6


def main(rounds: int = 2000) -> None:
    rpc_port, metrics_port = free_local_ports(2)
    pool = KvCachePoolConfig(
        protocol="tcp",
        global_segment_size=64 << 20,
        local_buffer_size=16 << 20,
        port=rpc_port,
        metrics_port=metrics_port,
    )
    with tempfile.TemporaryDirectory() as log_dir:
        master = MooncakeMaster(pool, "127.0.0.1", Path(log_dir) / "mooncake_master.log")
        master.start()
        try:
            with StoreClient.connect(master.store_config()) as client:
                us = asyncio.run(measure(client, rounds))
        finally:
            master.stop()
    print(f"pool_prefix_probe: 64-block prompt, 64 keys per probe: {us:.0f} us per probe ({rounds} probes)")


if __name__ == "__main__":
    main()
