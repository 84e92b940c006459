"""What the real master does with a full pool and with read leases, seen through StoreClient and /metrics."""

import random
import threading
import time

from motor.kvstore.client import StoreClient
from tests.fixtures.pool import TEST_SEGMENT_SIZE, RunningPool, StartPool

MIB = 1 << 20
LEASE_WAIT_LIMIT_S = 10.0


def mib_value(seed: int) -> bytes:
    return random.Random(seed).randbytes(MIB)


def test_twice_the_segment_is_written_without_errors_and_eviction_makes_room(
    mooncake_master: RunningPool,
) -> None:
    written = 2 * TEST_SEGMENT_SIZE // MIB
    keys = [f"overfill-{index}" for index in range(written)]
    with StoreClient.connect(mooncake_master.store_config) as client:
        client.put("lease-probe", b"read before the overfill")
        assert client.get("lease-probe") == b"read before the overfill"

        for index, key in enumerate(keys):
            client.put(key, mib_value(index))

        snapshot = mooncake_master.snapshot()
        present = client.exists_batch(keys)
        assert snapshot.eviction_runs > 0 and snapshot.evicted_keys > 0
        assert snapshot.allocated_bytes <= snapshot.capacity_bytes == TEST_SEGMENT_SIZE
        assert 0 < sum(present) < written
        assert snapshot.key_count < written
        assert client.get(keys[-1]) == mib_value(written - 1), "the newest object must survive eviction"
        assert client.get("lease-probe") == b"read before the overfill", "a leased object must not be evicted"


def test_put_refused_for_lack_of_space_succeeds_once_space_appears(mooncake_master: RunningPool) -> None:
    writer_config = mooncake_master.store_config | {"global_segment_size": 0}
    with StoreClient.connect(writer_config) as writer:
        segment_owner: list[StoreClient] = []
        # The pool has no segment until the owner connects, so the first attempts get -200 and are retried.
        joiner = threading.Timer(
            0.05, lambda: segment_owner.append(StoreClient.connect(mooncake_master.store_config))
        )
        joiner.start()
        try:
            writer.put("waited-for-space", b"bytes")
        finally:
            joiner.join()
        try:
            assert writer.get("waited-for-space") == b"bytes"
            assert mooncake_master.snapshot().put_failures > 0
        finally:
            segment_owner[0].close()


def test_read_lease_blocks_remove_until_it_expires(start_mooncake_master: StartPool) -> None:
    running = start_mooncake_master(default_kv_lease_ttl=1000)
    with StoreClient.connect(running.store_config) as client:
        client.put_batch({"leased": b"bytes", "leased-too": b"more bytes"})
        assert client.get_batch(["leased", "leased-too"]) == [b"bytes", b"more bytes"]

        assert client.remove("leased") is False
        assert client.remove_batch(["leased-too"]) == [False]
        assert client.exists("leased") and client.exists("leased-too")

        deadline = time.monotonic() + LEASE_WAIT_LIMIT_S
        while not client.remove("leased"):
            assert time.monotonic() < deadline, f"the 1000 ms lease still held after {LEASE_WAIT_LIMIT_S} s"
            time.sleep(0.1)
        assert client.get("leased") is None
        assert client.remove_batch(["leased-too", "never-written"]) == [True, True]


def test_forced_remove_ignores_the_lease(start_mooncake_master: StartPool) -> None:
    running = start_mooncake_master(default_kv_lease_ttl=60_000)
    with StoreClient.connect(running.store_config) as client:
        client.put_batch({"forced": b"bytes", "forced-too": b"more"})
        client.get_batch(["forced", "forced-too"])

        assert client.remove("forced") is False
        assert client.remove("forced", force=True) is True
        assert client.remove_batch(["forced-too"], force=True) == [True]
        assert client.get_batch(["forced", "forced-too"]) == [None, None]


def test_metrics_snapshot_follows_puts_gets_and_removes(mooncake_master: RunningPool) -> None:
    empty = mooncake_master.snapshot()
    value = random.Random(1).randbytes(64 << 10)
    with StoreClient.connect(mooncake_master.store_config) as client:
        for index in range(10):
            client.put(f"metric-{index}", value)
        client.put_batch({f"metric-batch-{index}": value for index in range(5)})
        after_puts = mooncake_master.snapshot()
        client.get("metric-0")
        client.get_batch(["metric-1", "metric-batch-0"])
        after_gets = mooncake_master.snapshot()
        client.remove("metric-9")
        after_remove = mooncake_master.snapshot()

    assert empty.key_count == 0 and empty.capacity_bytes == 0 and empty.segments == {}
    assert after_puts.key_count == 15
    assert after_puts.allocated_bytes == 15 * len(value)
    assert after_puts.capacity_bytes == TEST_SEGMENT_SIZE
    assert after_puts.active_clients == 1
    assert after_puts.put_requests - empty.put_requests == 15
    assert [usage.capacity_bytes for usage in after_puts.segments.values()] == [TEST_SEGMENT_SIZE]
    assert after_gets.get_requests - after_puts.get_requests == 3
    assert after_gets.get_hits - after_puts.get_hits == 3
    assert after_remove.key_count == 14
    assert after_remove.allocated_bytes == 14 * len(value)
