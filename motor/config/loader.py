"""Read user_config.json + env.json, apply compatibility rules, validate the whole topology.

One pass reports every problem: a key whose value is wrong is reported and then left out (its default applies),
so the remaining schema checks and the whole-topology rules still run; a rule is not reported again at a path
that already has a schema problem. Problems come sorted by path.
"""

import json
from pathlib import Path
from typing import Any, TypeVar, get_args

from pydantic import BaseModel, ValidationError

from motor.config.compat import (
    ENGINE_SECTIONS,
    NODE_MANAGER_KEY,
    NODE_MANAGER_KEY_ALT,
    merge_legacy_model_config,
)
from motor.config.errors import ConfigError, ConfigIssue, json_path
from motor.config.models import EnvConfig, UserConfig
from motor.config.pymotor_keys import BY_PATH, ENV_PREFIX, Status, keys_under
from motor.config.scheduler_roles import fold_role_scheduler_types
from motor.config.suggest import closest, did_you_mean
from motor.config.topology import Topology, build_topology
from motor.kv.pool import KvCachePoolConfig

M = TypeVar("M", bound=BaseModel)

USER_CONFIG_FILE = "user_config.json"
ENV_CONFIG_FILE = "env.json"
USER_VERSION = "v2.0"
ENV_VERSION = "2.0.0"
POOL_SECTIONS = ("kv_cache_pool_config", "kv_cache_store_config")
MOONCAKE_BACKEND = "mooncake"


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
    env_doc = _normalise_env(env_doc, warnings, issues)
    user = _validate(UserConfig, user_doc, "", issues)
    env = _validate(EnvConfig, env_doc, ENV_PREFIX, issues)
    if user is not None:
        _check_pool_extras(user, issues)
    schema_paths = [issue.path for issue in issues]
    topology = None
    if user is not None and env is not None:
        topology = build_topology(user, env, warnings, issues, frozenset(schema_paths))
    reported = _without_cascades(issues, schema_paths)
    if reported or topology is None:
        raise ConfigError(reported or [ConfigIssue("(document)", "not a user_config.json / env.json pair")])
    return topology


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


# ---- normalising: pyMotor's spellings, its keys motor does not implement ------------------------------------


def _normalise_user(doc: Any, warnings: list[str], issues: list[ConfigIssue]) -> Any:
    if not isinstance(doc, dict):
        return doc
    doc = json.loads(json.dumps(doc))
    _check_version(doc, "version", USER_VERSION, "", issues)
    _fold_node_manager_spelling(doc, "", issues)
    for section_key in ENGINE_SECTIONS:
        section = doc.get(section_key)
        if isinstance(section, dict):
            _fold_node_manager_spelling(section, f"{section_key}.", issues)
            merge_legacy_model_config(section_key, section, warnings)
    _strip_unimplemented(doc, "", UserConfig, warnings)
    _fold_scheduler_roles(doc, warnings, issues)
    _normalise_pool_sections(doc, warnings, issues)
    return doc


def _normalise_env(doc: Any, warnings: list[str], issues: list[ConfigIssue]) -> Any:
    if not isinstance(doc, dict):
        return doc
    doc = dict(doc)
    _check_version(doc, "version", ENV_VERSION, ENV_PREFIX, issues)
    _strip_unimplemented(doc, ENV_PREFIX, EnvConfig, warnings)
    return doc


def _check_version(
    doc: dict[str, Any], key: str, expected: str, prefix: str, issues: list[ConfigIssue]
) -> None:
    """Report a missing or wrong version, then assume the right one so every other check still runs."""
    value = doc.get(key)
    if value != expected:
        problem = "required" if key not in doc else f"{value!r} is not supported"
        issues.append(
            ConfigIssue(
                f"{prefix}{key}", f'{problem}: this format is "{expected}"; set "{key}": "{expected}"'
            )
        )
    doc[key] = expected


def _fold_node_manager_spelling(section: dict[str, Any], prefix: str, issues: list[ConfigIssue]) -> None:
    if NODE_MANAGER_KEY_ALT not in section:
        return
    if NODE_MANAGER_KEY in section:
        issues.append(
            ConfigIssue(
                f"{prefix}{NODE_MANAGER_KEY_ALT}",
                f"given together with {NODE_MANAGER_KEY}; keep only one of them",
            )
        )
        del section[NODE_MANAGER_KEY_ALT]
    else:
        section[NODE_MANAGER_KEY] = section.pop(NODE_MANAGER_KEY_ALT)


def _strip_unimplemented(
    node: dict[str, Any], path: str, model: type[BaseModel] | None, warnings: list[str]
) -> None:
    """Remove the keys pyMotor knows and motor does not implement (pymotor_keys.py), warning once for each."""
    for key in list(node):
        key_path = _join(path, key)
        row = BY_PATH.get(key_path)
        fields = model.model_fields if model is not None else {}
        if row is not None and row.status == Status.WARNED and key not in fields:
            del node[key]
            warnings.append(f"{key_path}: pyMotor setting not implemented by motor; {row.note}")
            continue
        child = node[key]
        if isinstance(child, dict) and keys_under(key_path):
            child_model = _model_in(fields[key].annotation) if key in fields else None
            _strip_unimplemented(child, key_path, child_model, warnings)


def _fold_scheduler_roles(doc: dict[str, Any], warnings: list[str], issues: list[ConfigIssue]) -> None:
    coordinator = doc.get("motor_coordinator_config")
    scheduler = coordinator.get("scheduler_config") if isinstance(coordinator, dict) else None
    if isinstance(scheduler, dict):
        fold_role_scheduler_types(scheduler, "motor_coordinator_config.scheduler_config", warnings, issues)


def _normalise_pool_sections(doc: dict[str, Any], warnings: list[str], issues: list[ConfigIssue]) -> None:
    """An empty pool section means no pool; kv_cache_store_config is the newer name of kv_cache_pool_config."""
    for key in POOL_SECTIONS:
        if doc.get(key) == {}:
            del doc[key]
    store = doc.get("kv_cache_store_config")
    if not isinstance(store, dict):
        return
    if "kv_cache_pool_config" in doc:
        issues.append(
            ConfigIssue(
                "kv_cache_store_config",
                "given together with kv_cache_pool_config (its older name); keep only one of them",
            )
        )
        del doc["kv_cache_store_config"]
        return
    backend = store.pop("backend", MOONCAKE_BACKEND)
    if backend != MOONCAKE_BACKEND:
        warnings.append(
            f"kv_cache_store_config.backend: {backend!r} is not deployed by motor; motor's KV pool is a Mooncake "
            "master with these settings, so the engines' store connector must use backend 'mooncake'"
        )


# ---- schema validation, key by key ------------------------------------------------------------------------


def _validate(model: type[M], doc: Any, prefix: str, issues: list[ConfigIssue]) -> M | None:
    """Validate, reporting each problem once; a wrong value is dropped (its default applies) and validation
    repeats, so one broken key does not hide the rest. None only when the document itself is unusable."""
    doc = json.loads(json.dumps(doc)) if isinstance(doc, dict) else doc
    reported: set[str] = set()
    while True:
        try:
            return model.model_validate(doc)
        except ValidationError as exc:
            progressed = False
            for error in exc.errors():
                location = tuple(error["loc"])
                path = prefix + (json_path(location) or "(document)")
                if path not in reported:
                    reported.add(path)
                    issues.append(ConfigIssue(path, _message(error, model, location, prefix)))
                progressed = _drop(doc, location) or progressed
            if not progressed:
                return None


def _drop(doc: Any, location: tuple[Any, ...]) -> bool:
    """Delete the deepest existing key on `location` (a value inside a list drops the whole list)."""
    node, parent, key = doc, None, None
    for part in location:
        if not isinstance(node, dict) or part not in node:
            break
        parent, key, node = node, part, node[part]
    if parent is None:
        return False
    del parent[key]
    return True


def _message(error: Any, model: type[BaseModel], location: tuple[Any, ...], prefix: str) -> str:
    kind = error["type"]
    given = error.get("input")
    if kind == "extra_forbidden":
        key = str(location[-1])
        section = _model_at(model, location[:-1])
        candidates = set(section.model_fields if section is not None else ())
        candidates |= set(keys_under(_key_path(prefix, location[:-1])))
        candidates.discard(key)
        return f"unknown key{did_you_mean(key, candidates)}; check its spelling or remove it"
    if kind == "missing":
        return "required"
    if kind in ("int_type", "int_from_float"):
        return f"must be an integer, not {given!r}"
    if kind == "float_type":
        return f"must be a number, not {given!r}"
    if kind == "bool_type":
        return f"must be true or false, not {given!r}"
    if kind in ("string_type", "dict_type", "list_type", "model_type"):
        expected = {"string_type": "a string", "dict_type": "an object", "list_type": "a list"}.get(
            kind, "an object"
        )
        return f"must be {expected}, not {given!r}"
    message = str(error["msg"]).removeprefix("Value error, ")
    if kind == "literal_error" and isinstance(given, str):
        expected = error.get("ctx", {}).get("expected", "")
        options = [part.strip(" '") for part in expected.replace(" or ", ",").split(",")]
        message += did_you_mean(given, options)
    return message


def _key_path(prefix: str, location: tuple[Any, ...]) -> str:
    path = json_path(location)
    if prefix == ENV_PREFIX:
        return ENV_PREFIX if not path else f"{ENV_PREFIX}{path}"
    return path


def _model_at(model: type[BaseModel] | None, location: tuple[Any, ...]) -> type[BaseModel] | None:
    for part in location:
        if model is None or not isinstance(part, str) or part not in model.model_fields:
            return None
        model = _model_in(model.model_fields[part].annotation)
    return model


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in get_args(annotation):
        found = _model_in(argument)
        if found is not None:
            return found
    return None


def _check_pool_extras(user: UserConfig, issues: list[ConfigIssue]) -> None:
    """Unknown pool keys pass through to the store config, except near-misses of motor's own keys."""
    known = set(KvCachePoolConfig.model_fields)
    for section in POOL_SECTIONS:
        pool = getattr(user, section)
        for key in (pool.model_extra or {}) if pool is not None else {}:
            match = closest(key, known)
            if match is not None:
                issues.append(
                    ConfigIssue(
                        f"{section}.{key}",
                        f"unknown key (did you mean {match!r}?); other keys are copied into the engines' store "
                        "config, this one looks misspelt",
                    )
                )


# ---- reporting --------------------------------------------------------------------------------------------


def _without_cascades(issues: list[ConfigIssue], schema_paths: list[str]) -> list[ConfigIssue]:
    """Every issue once, sorted by path (env.json last); rules are not reported again where a value was wrong."""
    schema = set(schema_paths)
    kept: dict[tuple[str, str], ConfigIssue] = {}
    for position, issue in enumerate(issues):
        rule = position >= len(schema_paths)
        if rule and any(
            issue.path == path or issue.path.startswith((f"{path}.", f"{path}[")) for path in schema
        ):
            continue
        kept.setdefault((issue.path, issue.message), issue)
    return sorted(kept.values(), key=lambda issue: (issue.path.startswith(ENV_PREFIX), issue.path))


def _join(path: str, key: str) -> str:
    if not path:
        return key
    return f"{path}{key}" if path == ENV_PREFIX else f"{path}.{key}"
