"""Which user_config.json changes a running deployment accepts in place (pure).

`changed_paths(current, baseline)` diffs two raw documents into dotted paths (`a.b[3].c`): a key present on
one side only reports every leaf below it, a list whose length changed reports the list itself. A path is
allowed by a whitelist tree when, with `[i]` indices stripped, it walks the tree's dict nodes and ends on a
name in the final set. `--update-config` accepts only `UPDATE_WHITELIST` paths (settings components re-read
at runtime); `--update-instance-num` only the instance counts (`SCALE_WHITELIST`).
"""

import re
from typing import Any

from motor.config.compat import NODE_MANAGER_KEY, NODE_MANAGER_KEY_ALT
from motor.config.models import ExceptionConfig, TimeoutConfig

WhitelistTree = dict[str, "WhitelistTree | frozenset[str]"]

_LOG_LEVEL: WhitelistTree = {"logging_config": frozenset({"log_level"})}
# The seed's whitelist, restricted to the fields motor's models have.
_SEED_EXCEPTION_KEYS = {"max_retry", "retry_delay", "first_token_timeout", "infer_timeout"}
_SEED_TIMEOUT_KEYS = {
    "request_timeout",
    "connection_timeout",
    "read_timeout",
    "write_timeout",
    "keep_alive_timeout",
}

UPDATE_WHITELIST: WhitelistTree = {
    "motor_controller_config": _LOG_LEVEL,
    "motor_coordinator_config": {
        **_LOG_LEVEL,
        "exception_config": frozenset(_SEED_EXCEPTION_KEYS & ExceptionConfig.model_fields.keys()),
        "timeout_config": frozenset(_SEED_TIMEOUT_KEYS & TimeoutConfig.model_fields.keys()),
    },
    NODE_MANAGER_KEY: _LOG_LEVEL,
}

INSTANCE_COUNT_KEYS = frozenset({"p_instances_num", "d_instances_num", "hybrid_instances_num"})
SCALE_WHITELIST: WhitelistTree = {"motor_deploy_config": INSTANCE_COUNT_KEYS}

_INDEX = re.compile(r"\[\d+\]")


def changed_paths(current: Any, baseline: Any) -> list[str]:
    """Sorted dotted paths where `current` differs from `baseline`."""
    paths: list[str] = []
    _diff(_canonical(current), _canonical(baseline), "", paths)
    return sorted(set(paths))


def is_allowed(path: str, whitelist: WhitelistTree) -> bool:
    *parents, leaf = _INDEX.sub("", path).split(".")
    node: WhitelistTree | frozenset[str] = whitelist
    for part in parents:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return isinstance(node, frozenset) and leaf in node


def refused_changes(current: Any, baseline: Any, whitelist: WhitelistTree) -> list[str]:
    """Sorted changed paths the whitelist does not allow (empty: the update may proceed)."""
    return [path for path in changed_paths(current, baseline) if not is_allowed(path, whitelist)]


def _canonical(document: Any) -> Any:
    if isinstance(document, dict) and NODE_MANAGER_KEY_ALT in document and NODE_MANAGER_KEY not in document:
        document = dict(document)
        document[NODE_MANAGER_KEY] = document.pop(NODE_MANAGER_KEY_ALT)
    return document


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _diff(current: Any, baseline: Any, path: str, paths: list[str]) -> None:
    if isinstance(current, dict) and isinstance(baseline, dict):
        for key in current.keys() | baseline.keys():
            child = _join(path, str(key))
            if key not in baseline:
                _leaves(current[key], child, paths)
            elif key not in current:
                _leaves(baseline[key], child, paths)
            else:
                _diff(current[key], baseline[key], child, paths)
    elif isinstance(current, list) and isinstance(baseline, list):
        if len(current) != len(baseline):
            paths.append(path)
            return
        for index, (new, old) in enumerate(zip(current, baseline, strict=True)):
            _diff(new, old, f"{path}[{index}]", paths)
    elif current != baseline or isinstance(current, bool) != isinstance(baseline, bool):
        paths.append(path)


def _leaves(value: Any, path: str, paths: list[str]) -> None:
    if isinstance(value, dict) and value:
        for key, child in value.items():
            _leaves(child, _join(path, str(key)), paths)
    else:
        paths.append(path)
