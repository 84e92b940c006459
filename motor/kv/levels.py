"""Where the connectors of a kv_transfer_config sit: the top level, MultiConnector's sub-connectors, and the
transfer connector (MultiConnector's first sub-connector, else the top level). Tolerates unvalidated input."""

from typing import Any

from motor.kv.connectors import MULTI_CONNECTOR

Level = tuple[
    str, dict[str, Any]
]  # (JSON path suffix relative to kv_transfer_config, the connector's config)


def sub_connectors(transfer_config: dict[str, Any]) -> list[Any]:
    extra = transfer_config.get("kv_connector_extra_config") or {}
    connectors = extra.get("connectors") if isinstance(extra, dict) else None
    return connectors if isinstance(connectors, list) else []


def connector_levels(transfer_config: dict[str, Any]) -> list[Level]:
    """The top level, then every MultiConnector sub-connector that is an object, each with its path suffix."""
    levels: list[Level] = [("", transfer_config)]
    if transfer_config.get("kv_connector") == MULTI_CONNECTOR:
        levels += [
            (f".kv_connector_extra_config.connectors[{index}]", sub)
            for index, sub in enumerate(sub_connectors(transfer_config))
            if isinstance(sub, dict)
        ]
    return levels


def transfer_level(transfer_config: dict[str, Any]) -> Level:
    """The connector that moves KV between P and D ({} when MultiConnector's first sub-connector is missing)."""
    if transfer_config.get("kv_connector") != MULTI_CONNECTOR:
        return "", transfer_config
    connectors = sub_connectors(transfer_config)
    first = connectors[0] if connectors else None
    return ".kv_connector_extra_config.connectors[0]", first if isinstance(first, dict) else {}


def transfer_kv_port(transfer_config: dict[str, Any]) -> int | None:
    """The transfer connector's kv_port when it is a port number (1..65535)."""
    try:
        port = int(transfer_level(transfer_config)[1].get("kv_port"))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return port if 1 <= port <= 65535 else None
