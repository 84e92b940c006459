"""The pyMotor key table: it agrees with docs/pymotor-compat.md and motor's models, and the loader accepts every
key in it (warned keys with one warning naming their path)."""

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from motor.config import ConfigError, load_documents
from motor.config.compat import ENGINE_SECTIONS
from motor.config.compat_doc import with_table
from motor.config.loader import _model_in
from motor.config.models import EnvConfig, KvAffinityConfig, UserConfig
from motor.config.pymotor_keys import BY_PATH, ENV_PREFIX, PYMOTOR_KEYS, Origin, Status
from motor.config.scheduler_roles import ROLE_KEYS
from tests.unit.config_cases import aggregated, seed

DOC = Path(__file__).resolve().parents[2] / "docs" / "pymotor-compat.md"
# Keys the loader folds into motor's form before the models see them.
FOLDED = {
    "motor_nodemanager_config",
    "kv_cache_store_config.backend",
    *(
        f"motor_coordinator_config.exception_config.{key}"
        for key in ("recompute_enabled", "reschedule_enabled", "recompute_max_retry")
    ),
    *(f"{section}.model_config" for section in ENGINE_SECTIONS),
    *(
        f"motor_coordinator_config.scheduler_config.kv_affinity_{key}"
        for key in KvAffinityConfig.model_fields
    ),
    *(f"motor_coordinator_config.scheduler_config.{key}" for key in ROLE_KEYS),
}


def model_fields(model: type[BaseModel], prefix: str) -> dict[str, type[BaseModel] | None]:
    """Every field path of `model` (dotted), with the model of nested sections."""
    found: dict[str, type[BaseModel] | None] = {}
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}" if prefix in ("", ENV_PREFIX) else f"{prefix}.{name}"
        nested = _model_in(info.annotation)
        found[path] = nested
        if nested is not None and name != "engine_config":
            found.update(model_fields(nested, path))
    return found


USER_FIELDS = model_fields(UserConfig, "")
ENV_FIELDS = model_fields(EnvConfig, ENV_PREFIX)


def test_the_doc_table_is_the_code_table() -> None:
    page = DOC.read_text(encoding="utf-8")
    assert with_table(page) == page, "run: python -m motor.config.compat_doc docs/pymotor-compat.md"


def test_paths_are_unique() -> None:
    assert len(BY_PATH) == len(PYMOTOR_KEYS)


def test_implemented_keys_are_model_fields() -> None:
    fields = USER_FIELDS.keys() | ENV_FIELDS.keys()
    missing = [
        row.path
        for row in PYMOTOR_KEYS
        if row.status == Status.IMPLEMENTED and row.path not in fields and row.path not in FOLDED
    ]
    assert missing == []


def test_passed_through_pool_keys_reach_the_store_config() -> None:
    user, env = seed()
    pool_keys = [
        row.key
        for row in PYMOTOR_KEYS
        if row.parent == "kv_cache_pool_config" and row.status == Status.PASSED_THROUGH
    ]
    for key in pool_keys:
        user["kv_cache_pool_config"][key] = True
    topology = load_documents(user, env)
    from motor.kv.pool import engine_store_config

    store = engine_store_config(topology.pool, master_host="pool")
    assert {key: store[key] for key in pool_keys} == dict.fromkeys(pool_keys, True)


def test_every_motor_key_is_in_the_table() -> None:
    assert sorted(set(USER_FIELDS) - BY_PATH.keys()) == []
    assert sorted(set(ENV_FIELDS) - BY_PATH.keys()) == []


def place(document: dict[str, Any], path: str, value: Any) -> None:
    *parents, key = path.split(".")
    node = document
    for part in parents:
        node = node.setdefault(part, {})
    node[key] = value


def first_warned(path: str) -> str:
    """The path a warned key is reported at: its first warned ancestor (or itself) the loader removes, i.e. one
    that is not a model field; else its first warned ancestor, which motor checks, then reports."""
    parts = path.split(".")
    warned = [
        candidate
        for end in range(1, len(parts) + 1)
        if (row := BY_PATH.get(candidate := ".".join(parts[:end]))) is not None
        and row.status == Status.WARNED
    ]
    removed = [candidate for candidate in warned if candidate not in USER_FIELDS]
    return (removed or warned)[0]


WARNED = [row.path for row in PYMOTOR_KEYS if row.status == Status.WARNED]
# Warned keys motor still checks before reporting them need a valid value.
CHECKED_VALUES = {
    "kv_conductor_config": {"http_server_port": 13333},
    "kv_conductor_config.http_server_port": 13333,
    "kv_conductor_config.kvevent_instance": {},
}


@pytest.mark.parametrize("path", WARNED)
def test_every_warned_key_loads_with_one_warning_naming_it(path: str) -> None:
    user, env = aggregated() if path.startswith("motor_engine_union_config") else seed()
    if path.startswith(ENV_PREFIX):
        env[path.removeprefix(ENV_PREFIX)] = {}
    else:
        place(user, path, CHECKED_VALUES.get(path, {} if path == first_warned(path) else "value"))
    try:
        topology = load_documents(user, env)
    except ConfigError as exc:
        pytest.fail(f"{path} refused: {exc}")
    reported = first_warned(path) if not path.startswith(ENV_PREFIX) else path
    assert any(warning.startswith(f"{reported}: ") for warning in topology.warnings), topology.warnings


CORPUS = Path(__file__).resolve().parents[1] / "compat" / "corpus"
MINDIE_CASES = sorted(CORPUS.glob("mindie-motor-latest-*"))


def table_paths(node: dict[str, Any], prefix: str) -> set[str]:
    """The paths of `node` (a document at `prefix`) down to the table's leaves: a key's children are read only
    where the table lists keys under it (not inside engine_config, an env map or labels); the objects of a list
    (motor_deploy_config.storage's entries) are read at the list's path."""
    found: set[str] = set()
    for key, value in node.items():
        path = f"{prefix}{key}" if prefix in ("", ENV_PREFIX) else f"{prefix}.{key}"
        found.add(path)
        if not any(row.parent == path for row in PYMOTOR_KEYS):
            continue
        for child in value if isinstance(value, list) else [value]:
            if isinstance(child, dict):
                found |= table_paths(child, path)
    return found


def test_the_mindie_motor_corpus_cases_set_every_mindie_motor_key() -> None:
    assert len(MINDIE_CASES) == 2  # PD with encode, and hybrid (union): one config cannot hold both
    present: set[str] = set()
    for case in MINDIE_CASES:
        present |= table_paths(json.loads((case / "user_config.json").read_text()), "")
        present |= table_paths(json.loads((case / "env.json").read_text()), ENV_PREFIX)
    mindie = {row.path for row in PYMOTOR_KEYS if row.origin == Origin.MINDIE_MOTOR}
    assert sorted(mindie - present) == []
    assert sorted(path for path in present if path not in BY_PATH) == []  # every key it sets is in the table
