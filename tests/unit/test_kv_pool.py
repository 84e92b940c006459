import pytest

from motor.kv.pool import KvCachePoolConfig, engine_store_config, master_args
from motor.kv.sizes import format_size, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1GB", 1 << 30),
        ("512MB", 512 << 20),
        ("1.5GiB", 3 << 29),
        ("268435456", 268435456),
        (4096, 4096),
        ("64 kb", 64 << 10),
    ],
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["", "GB", "1XB", "-1GB", True, None, [1], 1.5])
def test_parse_size_rejects(bad):
    with pytest.raises(ValueError, match="is not a size"):
        parse_size(bad)


def test_format_size():
    assert format_size(1 << 30) == "1GiB"
    assert format_size(3 << 29) == "1.5GiB"
    assert format_size(100) == "100B"


def test_defaults_are_the_seed_defaults():
    pool = KvCachePoolConfig()
    assert (pool.metadata_server, pool.protocol, pool.device_name) == ("P2PHANDSHAKE", "ascend", "")
    assert pool.global_segment_size == 1 << 30
    assert (pool.port, pool.default_kv_lease_ttl) == (50088, 11000)


def test_master_args():
    pool = KvCachePoolConfig(port=50100, metrics_port=9100, eviction_ratio=0.2, default_kv_lease_ttl=5000)
    assert master_args(pool, bind_host="127.0.0.1") == [
        "--rpc_port=50100",
        "--rpc_address=127.0.0.1",
        "--metrics_port=9100",
        "--metrics_host=127.0.0.1",
        "--eviction_high_watermark_ratio=0.9",
        "--eviction_ratio=0.2",
        "--default_kv_lease_ttl=5000",
    ]
    local = KvCachePoolConfig(allocation_strategy="local_first")
    assert master_args(local, bind_host="h")[-1] == "--allocation_strategy=local_first"
    assert "allocation_strategy" not in engine_store_config(local, master_host="h"), "a master setting only"
    with pytest.raises(ValueError, match="allocation_strategy"):
        KvCachePoolConfig(allocation_strategy="nearest")


def test_engine_store_config():
    pool = KvCachePoolConfig(protocol="tcp", global_segment_size="256MB")
    assert engine_store_config(pool, master_host="10.0.0.5") == {
        "master_server_address": "10.0.0.5:50088",
        "metadata_server": "P2PHANDSHAKE",
        "protocol": "tcp",
        "device_name": "",
        "global_segment_size": 256 << 20,
        "local_buffer_size": 128 << 20,
    }
