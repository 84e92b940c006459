import json
import re
from pathlib import Path

import pytest

from motor.kv.pool import KvCachePoolConfig, engine_store_config
from motor.kvstore.config import CONFIG_PATH_ENV, load_store_config
from motor.kvstore.errors import StoreConfigError, StoreError
from motor.runtime.net import split_host_port


def write_json(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data))
    return path


def test_engine_store_config_round_trips_through_the_json_file(tmp_path: Path) -> None:
    config = engine_store_config(KvCachePoolConfig(protocol="tcp"), master_host="127.0.0.1")

    assert load_store_config(write_json(tmp_path / "store.json", config)) == config


def test_sizes_written_with_units_come_back_in_bytes(tmp_path: Path) -> None:
    config = engine_store_config(KvCachePoolConfig(), master_host="127.0.0.1")
    config |= {"global_segment_size": "1GB", "local_buffer_size": "128MB", "local_hostname": "127.0.0.1"}

    loaded = load_store_config(write_json(tmp_path / "store.json", config))

    assert loaded["global_segment_size"] == 1 << 30
    assert loaded["local_buffer_size"] == 128 << 20
    assert loaded["local_hostname"] == "127.0.0.1"


def test_default_path_is_the_environment_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = engine_store_config(KvCachePoolConfig(port=50123), master_host="127.0.0.1")
    monkeypatch.setenv(CONFIG_PATH_ENV, str(write_json(tmp_path / "store.json", config)))

    assert load_store_config()["master_server_address"] == "127.0.0.1:50123"


def test_unset_environment_variable_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CONFIG_PATH_ENV, raising=False)

    with pytest.raises(StoreConfigError, match=f"{CONFIG_PATH_ENV} is not set"):
        load_store_config()


def test_missing_keys_are_listed(tmp_path: Path) -> None:
    path = write_json(tmp_path / "store.json", {"metadata_server": "P2PHANDSHAKE", "protocol": "tcp"})

    with pytest.raises(StoreConfigError) as caught:
        load_store_config(path)

    message = str(caught.value)
    assert "master_server_address, global_segment_size, local_buffer_size" in message
    assert str(path) in message and "engine_store_config" in message


def test_unreadable_or_malformed_file_names_the_path(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")

    with pytest.raises(StoreConfigError, match=r"cannot read the store config .*broken\.json"):
        load_store_config(broken)
    with pytest.raises(StoreConfigError, match=r"cannot read the store config .*absent\.json"):
        load_store_config(tmp_path / "absent.json")
    with pytest.raises(StoreConfigError, match="must hold a JSON object, not list"):
        load_store_config(write_json(tmp_path / "list.json", [1, 2]))


def test_bad_master_address_and_size_are_explained(tmp_path: Path) -> None:
    config = engine_store_config(KvCachePoolConfig(), master_host="127.0.0.1")

    with pytest.raises(StoreConfigError, match="is not a host:port address"):
        load_store_config(write_json(tmp_path / "a.json", config | {"master_server_address": "nohost"}))
    with pytest.raises(StoreConfigError, match="'lots' is not a size"):
        load_store_config(write_json(tmp_path / "b.json", config | {"global_segment_size": "lots"}))


def test_config_errors_are_store_errors_and_value_errors(tmp_path: Path) -> None:
    with pytest.raises(StoreError):
        load_store_config(write_json(tmp_path / "empty.json", {}))
    with pytest.raises(ValueError):
        load_store_config(write_json(tmp_path / "empty.json", {}))


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("127.0.0.1:50088", ("127.0.0.1", 50088)),
        ("[::1]:9003", ("::1", 9003)),
        ("pool.local:1", ("pool.local", 1)),
    ],
)
def test_split_host_port(address: str, expected: tuple[str, int]) -> None:
    assert split_host_port(address) == expected


@pytest.mark.parametrize("address", ["50088", ":50088", "127.0.0.1:", "127.0.0.1:http"])
def test_split_host_port_refuses(address: str) -> None:
    with pytest.raises(ValueError, match=re.escape("e.g. '127.0.0.1:50088'")):
        split_host_port(address)
