"""`kv_transfer_config` inside an engine section: typed view, role filling and P/D agreement checks."""

import json
import posixpath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from motor.config.compat import engine_option
from motor.config.errors import ConfigIssue, json_path
from motor.kv.connectors import MULTI_CONNECTOR, is_pool_backend
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


def option_key(engine_config: dict[str, Any], name: str) -> str | None:
    """How engine_config spells the option `name` (`kv_transfer_config` or `kv-transfer-config`); None: absent."""
    for key in (name, name.replace("_", "-")):
        if key in engine_config:
            return key
    return None


def transfer_config_key(engine_config: dict[str, Any]) -> str | None:
    return option_key(engine_config, "kv_transfer_config")


def read_object_option(
    engine_config: dict[str, Any], name: str, section_path: str, example: str, issues: list[ConfigIssue]
) -> tuple[dict[str, Any] | None, str]:
    """(the JSON-object option `name` — an object or a JSON string of one — or None when absent or not an object,
    its JSON path); a broken one is recorded in `issues`."""
    key = option_key(engine_config, name)
    path = f"{section_path}.engine_config.{key or name}"
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
        issues.append(ConfigIssue(path, f"must be an object {example}"))
        return None, path
    return raw, path


def read_transfer_config(
    engine_config: dict[str, Any], section_path: str, issues: list[ConfigIssue]
) -> tuple[dict[str, Any] | None, str]:
    """Return (kv_transfer_config as a dict or None, its JSON path), recording structural problems."""
    raw, path = read_object_option(
        engine_config, "kv_transfer_config", section_path, "with kv_connector, kv_role, ...", issues
    )
    if raw is None:
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


def apply_role(config: dict[str, Any], path: str, expected: str, warnings: list[str]) -> dict[str, Any]:
    """Copy of `config` with every connector's kv_role set from the instance's role, as pyMotor does.

    A role that differs is replaced, with a warning; a pool backend may keep kv_both (it reads and writes the pool).
    """
    filled = json.loads(json.dumps(config))
    for suffix, level in connector_levels(filled):
        role = level.get("kv_role")
        if role == expected:
            continue
        if role == "kv_both" and suffix and is_pool_backend(str(level.get("kv_connector"))):
            continue
        level["kv_role"] = expected
        if role is not None:
            warnings.append(
                f"{path}{suffix}.kv_role: {role!r} replaced by {expected!r}: the kv_role follows the instance's "
                "role (as in pyMotor); remove it or set it to match"
            )
    return filled


def check_pd_agreement(
    prefill: dict[str, Any],
    prefill_path: str,
    decode: dict[str, Any],
    decode_path: str,
    issues: list[ConfigIssue],
) -> None:
    """P and D must move KV through the same transfer connector.

    Pool backends (MultiConnector's later sub-connectors) may differ or exist on one side only, and each
    engine's kv_port is its own listener, so neither is compared.
    """
    (p_suffix, p_level), (d_suffix, d_level) = transfer_level(prefill), transfer_level(decode)
    p_name, d_name = p_level.get("kv_connector"), d_level.get("kv_connector")
    if p_name != d_name:
        issues.append(
            ConfigIssue(
                f"{decode_path}{d_suffix}.kv_connector",
                f"decode's transfer connector {d_name!r} must be the prefill side's {p_name!r} "
                f"({prefill_path}{p_suffix}.kv_connector): P and D move KV through one transfer connector "
                "(MultiConnector's first sub-connector); pool connectors after it may differ or be one-sided",
            )
        )


def model_identity(engine_config: dict[str, Any]) -> str | None:
    """The model path or id, normalised so `/data/m/` and `/data/m` compare equal."""
    value = engine_option(engine_config, "model") or engine_option(engine_config, "model_path")
    if not isinstance(value, str) or not value:
        return None
    return posixpath.normpath(value) if "/" in value else value


def kv_cache_dtype(engine_config: dict[str, Any]) -> str | None:
    """The dtype of the KV cache as vLLM picks it: kv_cache_dtype unless "auto", else the model dtype.

    None when it depends on the model's own config ("auto" everywhere), which the config cannot tell.
    """
    for key in ("kv_cache_dtype", "dtype"):
        value = engine_option(engine_config, key)
        if value is not None and value != "auto":
            return str(value)
    return None


def check_engine_compatibility(
    prefill: dict[str, Any],
    prefill_path: str,
    decode: dict[str, Any],
    decode_path: str,
    issues: list[ConfigIssue],
) -> None:
    """What P and D must share so one's KV blocks are usable by the other and requests name one model.

    Lengths, batch sizes, memory and parallel sizes may differ (pyMotor tracks P and D max lengths apart).
    """
    checks = (
        ("model", model_identity, "the same model"),
        ("served_model_name", lambda config: engine_option(config, "served_model_name"), "one model name"),
        ("block_size", lambda config: engine_option(config, "block_size"), "the same KV block size"),
        ("kv_cache_dtype", kv_cache_dtype, "the same KV cache dtype (kv_cache_dtype, else dtype)"),
    )
    for key, read, needs in checks:
        p_value, d_value = read(prefill), read(decode)
        if p_value is not None and d_value is not None and p_value != d_value:
            if key == "kv_cache_dtype" and engine_option(decode, key) in (None, "auto"):
                key = "dtype"
            issues.append(
                ConfigIssue(
                    f"{decode_path}.engine_config.{key}",
                    f"{d_value!r} differs from the prefill side's {p_value!r} ({prefill_path}.engine_config); "
                    f"P and D need {needs}: KV from one engine is only usable by an engine with the same model "
                    "and cache layout",
                )
            )
