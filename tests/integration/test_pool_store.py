import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from mooncake.store import MooncakeDistributedStore

from motor.kvstore.client import StoreClient
from motor.kvstore.config import CONFIG_PATH_ENV, load_store_config
from motor.kvstore.errors import NO_AVAILABLE_HANDLE, StoreError, StoreUnavailable
from motor.runtime.backoff import Backoff
from motor.runtime.net import free_local_ports
from tests.fixtures.pool import TEST_LOCAL_BUFFER_SIZE, RunningPool

SIZES = {"1KiB": 1 << 10, "64KiB": 64 << 10, "1MiB": 1 << 20}


def payload(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
def test_round_trip_is_byte_exact(pool_client: StoreClient, size: int) -> None:
    value = payload(size, seed=size)

    pool_client.put(f"one-{size}", value)

    assert pool_client.get(f"one-{size}") == value
    assert pool_client.exists(f"one-{size}")


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
def test_batch_round_trip_is_byte_exact(pool_client: StoreClient, size: int) -> None:
    items = {f"batch-{size}-{index}": payload(size, seed=index) for index in range(4)}

    pool_client.put_batch(items)

    assert pool_client.get_batch(list(items)) == list(items.values())
    assert pool_client.exists_batch(list(items)) == [True] * 4


def test_missing_keys_read_as_none(pool_client: StoreClient) -> None:
    pool_client.put_batch({"here-1": b"one", "here-2": b"two"})

    assert pool_client.get("absent") is None
    assert not pool_client.exists("absent")
    assert pool_client.get_batch(["here-1", "absent", "here-2", "also-absent"]) == [
        b"one",
        None,
        b"two",
        None,
    ]
    assert pool_client.exists_batch(["absent", "here-2"]) == [False, True]


def test_empty_batches_make_no_call(pool_client: StoreClient) -> None:
    pool_client.put_batch({})

    assert pool_client.get_batch([]) == []
    assert pool_client.exists_batch([]) == []
    assert pool_client.remove_batch([]) == []


def test_put_keeps_the_first_value(pool_client: StoreClient) -> None:
    pool_client.put("first-wins", b"first")
    pool_client.put("first-wins", b"second, longer")
    pool_client.put_batch({"first-wins": b"third"})

    assert pool_client.get("first-wins") == b"first"


def test_upsert_replaces_values_even_while_leased(pool_client: StoreClient) -> None:
    pool_client.upsert("replaced", b"first")
    assert pool_client.get("replaced") == b"first"

    pool_client.upsert("replaced", b"second, longer")
    pool_client.upsert_batch({"replaced-too": b"a"})
    pool_client.upsert_batch({"replaced-too": b"b", "fresh": b"c"})

    assert pool_client.get_batch(["replaced", "replaced-too", "fresh"]) == [b"second, longer", b"b", b"c"]
    with pytest.raises(StoreError, match="upsert 'empty-upsert': Mooncake cannot store empty values"):
        pool_client.upsert("empty-upsert", b"")


def test_remove_of_an_unread_object(pool_client: StoreClient) -> None:
    pool_client.put("unread", b"bytes")

    assert pool_client.remove("unread")
    assert pool_client.get("unread") is None
    assert pool_client.remove("unread"), "removing an absent key leaves it absent"


def test_client_accepts_bytearray_and_memoryview(pool_client: StoreClient) -> None:
    pool_client.put("from-bytearray", bytearray(b"abc"))
    pool_client.put("from-memoryview", memoryview(b"xyzw")[1:3])

    assert pool_client.get_batch(["from-bytearray", "from-memoryview"]) == [b"abc", b"yz"]


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
def test_zero_copy_round_trip(pool_client: StoreClient, size: int) -> None:
    value = payload(size, seed=7)
    buffer = pool_client.register_buffer(4 << 20)
    buffer.view[size : 2 * size] = value

    pool_client.put_from(f"zero-copy-{size}", buffer, size, offset=size)
    buffer.view[: 4 << 20] = bytes(4 << 20)

    assert pool_client.get_into(f"zero-copy-{size}", buffer, offset=3 * size) == size
    assert buffer.view[3 * size : 4 * size] == value
    assert pool_client.get(f"zero-copy-{size}") == value


def test_zero_copy_reports_missing_keys_and_small_buffers(pool_client: StoreClient) -> None:
    buffer = pool_client.register_buffer(64 << 10)
    pool_client.put("too-big-for-the-buffer", payload(128 << 10, seed=1))

    assert pool_client.get_into("absent", buffer) is None
    with pytest.raises(StoreError, match="131072 bytes but the buffer holds 65536 from offset 0"):
        pool_client.get_into("too-big-for-the-buffer", buffer)
    with pytest.raises(ValueError, match=r"bytes \[65000, 66000\) lie outside the 65536-byte buffer"):
        pool_client.put_from("k", buffer, 1000, offset=65000)


def test_unregistered_buffer_is_refused(pool_client: StoreClient) -> None:
    buffer = pool_client.register_buffer(4096)
    pool_client.unregister_buffer(buffer)

    with pytest.raises(ValueError, match="not registered"):
        pool_client.put_from("k", buffer, 10)


def test_values_mooncake_cannot_hold_are_explained(pool_client: StoreClient) -> None:
    with pytest.raises(StoreError, match="cannot store empty values"):
        pool_client.put("empty", b"")
    with pytest.raises(StoreError, match="exceeds this client's local_buffer_size"):
        pool_client.put("oversized", bytes(TEST_LOCAL_BUFFER_SIZE + 1))
    with pytest.raises(StoreError, match="put_batch of 2 keys: Mooncake cannot store empty values"):
        pool_client.put_batch({"fine": b"bytes", "empty-in-batch": b""})


def test_closed_client_refuses_calls_instead_of_crashing(shared_mooncake_master: RunningPool) -> None:
    client = StoreClient.connect(shared_mooncake_master.store_config)
    buffer = client.register_buffer(4096)
    client.close()
    client.close()

    for call in (lambda: client.put("k", b"v"), lambda: client.get("k"), lambda: client.get_batch(["k"])):
        with pytest.raises(StoreError, match="the store client is closed"):
            call()
    assert not buffer.registered


def test_getter_without_segment_reads_the_owners_objects(shared_mooncake_master: RunningPool) -> None:
    reader_config = shared_mooncake_master.store_config | {"global_segment_size": 0}
    value = payload(1 << 20, seed=3)
    with (
        StoreClient.connect(shared_mooncake_master.store_config) as owner,
        StoreClient.connect(reader_config) as reader,
    ):
        owner.put("shared", value)

        assert reader.get("shared") == value
        assert reader.get_batch(["shared", "absent"]) == [value, None]


def test_client_without_any_segment_in_the_pool_gets_a_clear_no_space_error(
    mooncake_master: RunningPool,
) -> None:
    config = mooncake_master.store_config | {"global_segment_size": 0}
    quick = Backoff(initial_s=0.001, cap_s=0.002, max_attempts=3)
    with (
        StoreClient.connect(config, retry=quick) as lonely,
        pytest.raises(
            StoreError, match=r"no space \(NO_AVAILABLE_HANDLE, -200\) through 3 attempts"
        ) as caught,
    ):
        lonely.put("nowhere", b"bytes")

    assert caught.value.code == NO_AVAILABLE_HANDLE


SEGMENT_HOLDER = """
import json, sys, time
from motor.kvstore.client import StoreClient
client = StoreClient.connect(json.loads(sys.argv[1]))
print("ready", flush=True)
time.sleep(120)
"""


def test_writes_land_while_killed_clients_segments_are_still_registered(mooncake_master: RunningPool) -> None:
    """A SIGKILLed client's segment stays in the master for about 10 s and placements that land on it fail
    (TRANSFER_FAIL, -800); with three dead segments beside one live one most first placements do: every write
    still succeeds, placed anew on the writer's own segment."""
    config = mooncake_master.store_config
    with StoreClient.connect(config) as survivor:
        holders = [
            subprocess.Popen(
                [sys.executable, "-c", SEGMENT_HOLDER, json.dumps(config)], stdout=subprocess.PIPE, text=True
            )
            for _ in range(3)
        ]
        try:
            for holder in holders:
                assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        finally:
            for holder in holders:
                holder.kill()
                holder.wait(timeout=10)
        values = {f"after-kill-{i}": payload(4096, seed=i) for i in range(40)}
        for key, value in values.items():
            survivor.put(key, value)
        survivor.upsert("upserted-after-kill", b"u" * 512)
        batch = {f"batch-after-kill-{i}": payload(4096, seed=i) for i in range(8)}
        survivor.put_batch(batch)
        assert survivor.get_batch([*values, *batch]) == [*values.values(), *batch.values()]
        assert mooncake_master.master.running


def test_adopted_native_store_and_client_see_the_same_objects(shared_mooncake_master: RunningPool) -> None:
    config = shared_mooncake_master.store_config
    native = MooncakeDistributedStore()
    code = native.setup(
        "127.0.0.1",
        config["metadata_server"],
        config["global_segment_size"],
        config["local_buffer_size"],
        config["protocol"],
        config["device_name"],
        config["master_server_address"],
    )
    assert code == 0

    with StoreClient.adopt(native, config) as client:
        client.put("adopted", b"through motor")
        native.put("native", b"through mooncake")

        assert native.get("adopted") == b"through motor"
        assert client.get("native") == b"through mooncake"


def test_connect_reads_the_json_engines_get(
    shared_mooncake_master: RunningPool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "mooncake.json"
    path.write_text(json.dumps(shared_mooncake_master.store_config))
    monkeypatch.setenv(CONFIG_PATH_ENV, str(path))

    with StoreClient.connect(load_store_config()) as client:
        client.put("via-file", b"ok")
        assert client.get("via-file") == b"ok"
        assert client.master_address == f"127.0.0.1:{shared_mooncake_master.pool.port}"


def test_unreachable_master_fails_fast_and_says_so(shared_mooncake_master: RunningPool) -> None:
    nobody = free_local_ports(1)[0]
    config = shared_mooncake_master.store_config | {"master_server_address": f"127.0.0.1:{nobody}"}

    with pytest.raises(StoreUnavailable) as caught:
        StoreClient.connect(config, connect_timeout_s=1.0)

    # This message comes from the connection probe, which runs before Mooncake's setup and its ~90 s of retries.
    message = str(caught.value)
    assert f"127.0.0.1:{nobody} does not accept connections" in message
    assert "start it" in message
