"""`kv_transfer_config` inside an engine section: typed view, role filling and P/D agreement checks."""

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from motor.config.compat import engine_option
from motor.config.errors import ConfigIssue, json_path
from motor.kv.connectors import MULTI_CONNECTOR
from motor.kv.levels import connector_levels, transfer_level

KvRole = Literal["kv_producer", "kv_consumer", "kv_both"]


class KvTransferConfig(BaseModel):
    """The keys motor reads; every other vLLM key passes through untouched."""

    model_config = ConfigDict(extra="allow")

    kv_connector: str | None = None
    kv_role: KvRole | None = None
    kv_port: int | str | None = None
    engine_id: str | None = None
    kv_connector_extra_config: dict[str, Any] = {}


def transfer_config_key(engine_config: dict[str, Any]) -> str | None:
    for key in ("kv_transfer_config", "kv-transfer-config"):
        if key in engine_config:
            return key
    return None


def read_transfer_config(
    engine_config: dict[str, Any], section_path: str, issues: list[ConfigIssue]
) -> tuple[dict[str, Any] | None, str]:
    """Return (kv_transfer_config as a dict or None, its JSON path), recording structural problems."""
    key = transfer_config_key(engine_config)
    path = f"{section_path}.engine_config.{key or 'kv_transfer_config'}"
    if key is None:
        return None, path
    raw = engine_config[key]
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            issues.append(ConfigIssue(path, f"not valid JSON ({exc.msg}); write it as a JSON object"))
            return None, path
    if not isinstance(raw, dict):
        issues.append(ConfigIssue(path, "must be an object with kv_connector, kv_role, ..."))
        return None, path
    before = len(issues)
    if not _check_shape(raw, path, issues):
        return None, path
    if raw.get("kv_connector") == MULTI_CONNECTOR:
        connectors = (raw.get("kv_connector_extra_config") or {}).get("connectors")
        connectors_path = f"{path}.kv_connector_extra_config.connectors"
        if not isinstance(connectors, list) or not connectors:
            issues.append(
                ConfigIssue(
                    connectors_path,
                    "MultiConnector needs at least one sub-connector: the transfer connector first, then any pool "
                    'backend (e.g. [{"kv_connector": "MooncakeLayerwiseConnector"}, '
                    '{"kv_connector": "AscendStoreConnector"}])',
                )
            )
        else:
            for index, sub in enumerate(connectors):
                sub_path = f"{connectors_path}[{index}]"
                if not isinstance(sub, dict):
                    issues.append(
                        ConfigIssue(sub_path, "each sub-connector must be an object with kv_connector")
                    )
                    continue
                if not _check_shape(sub, sub_path, issues):
                    continue
                if not sub.get("kv_connector"):
                    issues.append(ConfigIssue(f"{sub_path}.kv_connector", "required: name the sub-connector"))
                if "kv_load_failure_policy" in sub:
                    issues.append(
                        ConfigIssue(
                            f"{sub_path}.kv_load_failure_policy",
                            "belongs on the top-level MultiConnector kv_transfer_config, not on a sub-connector; "
                            f"move it to {path}.kv_load_failure_policy",
                        )
                    )
    return (raw if len(issues) == before else None), path


def _check_shape(raw: dict[str, Any], path: str, issues: list[ConfigIssue]) -> bool:
    try:
        KvTransferConfig.model_validate(raw)
    except ValidationError as exc:
        for error in exc.errors():
            issues.append(ConfigIssue(json_path((path, *error["loc"])), error["msg"]))
        return False
    return True


def apply_role(config: dict[str, Any], path: str, expected: str, issues: list[ConfigIssue]) -> dict[str, Any]:
    """Copy of `config` with kv_role filled where missing; a different role is an error."""
    filled = json.loads(json.dumps(config))
    for suffix, level in connector_levels(filled):
        role = level.get("kv_role")
        if role is None:
            level["kv_role"] = expected
        elif role != expected:
            issues.append(
                ConfigIssue(
                    f"{path}{suffix}.kv_role",
                    f"{role!r} on this side must be {expected!r}; set it or remove it",
                )
            )
    return filled


def check_pd_agreement(
    prefill: dict[str, Any],
    prefill_path: str,
    decode: dict[str, Any],
    decode_path: str,
    issues: list[ConfigIssue],
) -> None:
    """P and D must use the same connector chain and meet on the transfer connector's kv_port."""
    p_names = [level.get("kv_connector") for _, level in connector_levels(prefill)]
    d_names = [level.get("kv_connector") for _, level in connector_levels(decode)]
    if p_names != d_names:
        issues.append(
            ConfigIssue(
                f"{decode_path}.kv_connector",
                f"decode connectors {d_names} must equal prefill connectors {p_names} in names and order "
                f"(from {prefill_path})",
            )
        )
        return
    p_transfer, d_transfer = transfer_level(prefill), transfer_level(decode)
    p_port, d_port = p_transfer[1].get("kv_port"), d_transfer[1].get("kv_port")
    if (p_port is not None or d_port is not None) and str(p_port) != str(d_port):
        issues.append(
            ConfigIssue(
                f"{decode_path}{d_transfer[0]}.kv_port",
                f"{d_port!r} must equal the prefill side's kv_port {p_port!r} ({prefill_path}{p_transfer[0]}.kv_port): "
                "the transfer connector meets on one port",
            )
        )


COMPATIBILITY_KEYS = ("model", "served_model_name", "block_size", "dtype", "max_model_len")


def check_engine_compatibility(
    prefill: dict[str, Any],
    prefill_path: str,
    decode: dict[str, Any],
    decode_path: str,
    issues: list[ConfigIssue],
) -> None:
    for key in COMPATIBILITY_KEYS:
        p_value, d_value = engine_option(prefill, key), engine_option(decode, key)
        if p_value is not None and d_value is not None and p_value != d_value:
            issues.append(
                ConfigIssue(
                    f"{decode_path}.engine_config.{key}",
                    f"{d_value!r} differs from the prefill side's {p_value!r} ({prefill_path}.engine_config.{key}); "
                    "KV from one engine is only usable by an engine with the same model and cache layout",
                )
            )
