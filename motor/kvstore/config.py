"""The store config a client starts from: the dict of `motor.kv.pool.engine_store_config()`, or the JSON file
motor writes for engines (`$MOONCAKE_CONFIG_PATH`), checked."""

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from motor.kv.sizes import parse_size
from motor.kvstore.errors import StoreConfigError
from motor.protocol import env as env_names
from motor.runtime.net import split_host_port

CONFIG_PATH_ENV = env_names.STORE_CONFIG_PATH


@dataclass(frozen=True)
class StoreSettings:
    """A checked store config, sizes in bytes."""

    master_server_address: str
    metadata_server: str
    protocol: str
    device_name: str
    global_segment_size: int
    local_buffer_size: int


REQUIRED_KEYS = (
    "master_server_address",
    "metadata_server",
    "protocol",
    "global_segment_size",
    "local_buffer_size",
)


def store_settings(config: Mapping[str, Any], source: str) -> StoreSettings:
    """`config` checked; `source` names it in the errors."""
    missing = [key for key in REQUIRED_KEYS if key not in config]
    if missing:
        raise StoreConfigError(
            f"{source} lacks {', '.join(missing)}; generate it with motor.kv.pool.engine_store_config()"
        )
    try:
        split_host_port(str(config["master_server_address"]))
        return StoreSettings(
            master_server_address=str(config["master_server_address"]),
            metadata_server=str(config["metadata_server"]),
            protocol=str(config["protocol"]),
            device_name=str(config.get("device_name") or ""),
            global_segment_size=parse_size(config["global_segment_size"]),
            local_buffer_size=parse_size(config["local_buffer_size"]),
        )
    except ValueError as exc:
        raise StoreConfigError(f"{source}: {exc}") from exc


def load_store_config(path: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Read and check the store config JSON at `path` (default `$MOONCAKE_CONFIG_PATH`); sizes in bytes."""
    if path is None:
        path = os.environ.get(CONFIG_PATH_ENV)
        if not path:
            raise StoreConfigError(
                f"{CONFIG_PATH_ENV} is not set; point it at the store config JSON motor writes for engines"
            )
    try:
        config = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise StoreConfigError(f"cannot read the store config {path}: {exc}") from exc
    if not isinstance(config, dict):
        raise StoreConfigError(f"{path} must hold a JSON object, not {type(config).__name__}")
    settings = store_settings(config, str(path))
    config["global_segment_size"] = settings.global_segment_size
    config["local_buffer_size"] = settings.local_buffer_size
    return config
