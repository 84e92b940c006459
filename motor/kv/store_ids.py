"""Per-engine ids for the host-local lookup socket of store connectors.

vLLM's MooncakeStoreConnector (like vllm-ascend's AscendStoreConnector) answers its scheduler's prefix lookups
over an IPC socket whose path is built from the id in its extra config (`lookup_rpc_port`, default 0), the
hostname and the DP rank, nothing else. Engines on one host with the same id bind the same path: the last one
to start takes it over, and the others' lookups reach a foreign worker or wait forever, which stalls their
scheduler. So instance k of the plan (order prefill, decode, union) gets the configured id + k, as pyMotor does.
"""

import copy
from dataclasses import dataclass
from typing import Any

from motor.kv.connectors import lookup_id_key
from motor.kv.levels import connector_levels


@dataclass(frozen=True)
class StoreLookupId:
    path: str  # JSON path suffix of the id, relative to kv_transfer_config
    connector: str
    key: str
    base: int | None  # the configured id (0 when absent); None when it is not a non-negative integer
    raw: Any


def store_lookup_ids(transfer_config: dict[str, Any]) -> list[StoreLookupId]:
    """The store connectors of a kv_transfer_config that own a host-local lookup socket."""
    found = []
    for suffix, level in connector_levels(transfer_config):
        name = str(level.get("kv_connector"))
        key = lookup_id_key(name)
        if key is None:
            continue
        extra = level.get("kv_connector_extra_config")
        raw = extra.get(key, 0) if isinstance(extra, dict) else 0
        found.append(
            StoreLookupId(f"{suffix}.kv_connector_extra_config.{key}", name, key, _non_negative_int(raw), raw)
        )
    return found


def with_store_lookup_ids(transfer_config: dict[str, Any], ordinal: int) -> dict[str, Any]:
    """Copy of a kv_transfer_config whose store connectors use lookup id `configured + ordinal`."""
    filled = copy.deepcopy(transfer_config)
    for _, level in connector_levels(filled):
        key = lookup_id_key(str(level.get("kv_connector")))
        if key is None:
            continue
        extra = level.get("kv_connector_extra_config")
        if not isinstance(extra, dict):
            extra = level["kv_connector_extra_config"] = {}
        base = _non_negative_int(extra.get(key, 0))
        if base is None:
            raise ValueError(
                f"kv_connector_extra_config.{key}: {extra.get(key)!r} is not a non-negative integer"
            )
        extra[key] = str(base + ordinal)
    return filled


def _non_negative_int(raw: Any) -> int | None:
    """An id written as a JSON integer or a string of digits (vLLM reads either)."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw if raw >= 0 else None
    return int(raw) if isinstance(raw, str) and raw.strip().isdigit() else None
