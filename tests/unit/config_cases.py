"""Builders for config documents used by the config tests: the seed example, copied per test."""

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from motor.config import ConfigError, load_documents

SEED_DIR = Path(__file__).resolve().parents[2] / "examples" / "infer_engines" / "vllm"
_SEED_USER = json.loads((SEED_DIR / "user_config.json").read_text())
_SEED_ENV = json.loads((SEED_DIR / "env.json").read_text())


def seed() -> tuple[dict[str, Any], dict[str, Any]]:
    return copy.deepcopy(_SEED_USER), copy.deepcopy(_SEED_ENV)


def transfer(user: dict[str, Any], role: str) -> dict[str, Any]:
    return user[f"motor_engine_{role}_config"]["engine_config"]["kv_transfer_config"]


def sub(user: dict[str, Any], role: str, index: int) -> dict[str, Any]:
    return transfer(user, role)["kv_connector_extra_config"]["connectors"][index]


def aggregated() -> tuple[dict[str, Any], dict[str, Any]]:
    user = {
        "version": "v2.0",
        "motor_deploy_config": {"hybrid_instances_num": 2, "deploy_mode": "local", "hardware_type": "cpu"},
        "motor_engine_union_config": {"engine_type": "sim", "engine_config": {"served_model_name": "tiny"}},
    }
    return user, {"version": "2.0.0"}


def issues_of(user: dict[str, Any], env: dict[str, Any]) -> dict[str, str]:
    """The problems loading the pair reports, by JSON path (several at one path joined by newlines)."""
    with pytest.raises(ConfigError) as caught:
        load_documents(user, env)
    found: dict[str, str] = {}
    for issue in caught.value.issues:
        found[issue.path] = f"{found[issue.path]}\n{issue.message}" if issue.path in found else issue.message
    return found
