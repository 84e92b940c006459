"""Read user_config.json + env.json, apply compatibility rules, validate the whole topology."""

import json
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from motor.config.compat import (
    ENGINE_SECTIONS,
    NODE_MANAGER_KEY,
    NODE_MANAGER_KEY_ALT,
    UNSUPPORTED_ENV_SECTIONS,
    merge_legacy_model_config,
    strip_unsupported,
)
from motor.config.errors import ConfigError, ConfigIssue, json_path
from motor.config.models import EnvConfig, UserConfig
from motor.config.topology import Topology, build_topology

M = TypeVar("M", bound=BaseModel)

USER_CONFIG_FILE = "user_config.json"
ENV_CONFIG_FILE = "env.json"


class ConfigPathError(ValueError):
    """The command line does not name a usable pair of config files."""


def resolve_config_paths(
    config_dir: str | Path | None, user_config: str | Path | None, env_config: str | Path | None
) -> tuple[Path, Path]:
    """Explicit files win over a directory; one file without the other is a usage error."""
    if (user_config is None) != (env_config is None):
        raise ConfigPathError(
            "--user-config and --env-config (--config/--env) must be given together, or use --config-dir"
        )
    if user_config is not None and env_config is not None:
        paths = Path(user_config), Path(env_config)
    elif config_dir is not None:
        directory = Path(config_dir)
        if not directory.is_dir():
            raise ConfigPathError(f"config directory {directory} does not exist")
        paths = directory / USER_CONFIG_FILE, directory / ENV_CONFIG_FILE
    else:
        raise ConfigPathError(
            "missing configuration: use --config-dir DIR, or --user-config F with --env-config F"
        )
    for path in paths:
        if not path.is_file():
            where = f" in {path.parent}" if config_dir is not None and user_config is None else ""
            raise ConfigPathError(f"{path.name} not found{where} ({path})")
    return paths


def load_config(user_path: Path, env_path: Path) -> Topology:
    return load_documents(_read_json(user_path), _read_json(env_path))


def load_documents(user_doc: Any, env_doc: Any) -> Topology:
    """Validate already-parsed documents; raise ConfigError with every problem found."""
    warnings: list[str] = []
    issues: list[ConfigIssue] = []
    user_doc = _normalise_user(user_doc, warnings, issues)
    env_doc = _normalise_env(env_doc, warnings)
    raw_pool = user_doc.get("kv_cache_pool_config") if isinstance(user_doc, dict) else None
    raw_pool_present = isinstance(raw_pool, dict) and bool(raw_pool)
    if isinstance(user_doc, dict) and raw_pool == {}:
        del user_doc["kv_cache_pool_config"]
    user = _validate(UserConfig, user_doc, "", issues)
    env = _validate(EnvConfig, env_doc, "env.json:", issues)
    if issues or user is None or env is None:
        raise ConfigError(issues)
    return build_topology(user, env, raw_pool_present, warnings)


def _read_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([ConfigIssue(str(path), f"cannot read: {exc.strerror}")]) from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            [ConfigIssue(str(path), f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}")]
        ) from exc


def _normalise_user(doc: Any, warnings: list[str], issues: list[ConfigIssue]) -> Any:
    if not isinstance(doc, dict):
        return doc
    doc = json.loads(json.dumps(doc))
    if NODE_MANAGER_KEY_ALT in doc:
        if NODE_MANAGER_KEY in doc:
            issues.append(
                ConfigIssue(
                    NODE_MANAGER_KEY_ALT, f"given together with {NODE_MANAGER_KEY}; keep only one of them"
                )
            )
        else:
            doc[NODE_MANAGER_KEY] = doc.pop(NODE_MANAGER_KEY_ALT)
    for section_key in ENGINE_SECTIONS:
        section = doc.get(section_key)
        if isinstance(section, dict):
            if NODE_MANAGER_KEY_ALT in section and NODE_MANAGER_KEY not in section:
                section[NODE_MANAGER_KEY] = section.pop(NODE_MANAGER_KEY_ALT)
            merge_legacy_model_config(section_key, section, warnings)
    strip_unsupported(doc, warnings)
    return doc


def _normalise_env(doc: Any, warnings: list[str]) -> Any:
    if not isinstance(doc, dict):
        return doc
    doc = dict(doc)
    for key in sorted(UNSUPPORTED_ENV_SECTIONS & doc.keys()):
        del doc[key]
        warnings.append(f"env.json:{key}: pyMotor section not implemented by motor; ignored")
    return doc


def _validate(model: type[M], doc: Any, prefix: str, issues: list[ConfigIssue]) -> M | None:
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        for error in exc.errors():
            path = prefix + (json_path(error["loc"]) or "(document)")
            issues.append(ConfigIssue(path, _message(error)))
        return None


def _message(error: Any) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        return "unknown key; check its spelling or remove it"
    if kind == "missing":
        return "required"
    message = str(error["msg"])
    return message.removeprefix("Value error, ")
