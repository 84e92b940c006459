"""scheduler_type kv_cache_affinity's whole-topology rules (motor/config/kv_routing.py): each engine setting under
which the coordinator could not tokenize or hash as the publishing engines do is refused at its JSON path, with
the fix; the seed example (Ascend, block size 128, the pool on) and a sim union deployment pass."""

from typing import Any

import pytest

from motor.config import load_documents
from tests.unit.config_cases import aggregated, issues_of, seed

PREFILL = "motor_engine_prefill_config"
DECODE = "motor_engine_decode_config"


def kv_routed(user: dict[str, Any]) -> dict[str, Any]:
    user.setdefault("motor_coordinator_config", {}).setdefault("scheduler_config", {})["scheduler_type"] = (
        "kv_cache_affinity"
    )
    return user


def engine_config(user: dict[str, Any], section: str = PREFILL) -> dict[str, Any]:
    return user[section]["engine_config"]


def test_the_seed_example_and_a_sim_union_deployment_pass() -> None:
    user, env = seed()
    assert load_documents(kv_routed(user), env).profile is not None
    user, env = aggregated()
    assert set(load_documents(kv_routed(user), env).roles) == {"union"}


def test_an_engine_type_the_coordinator_cannot_tokenize_for_is_refused() -> None:
    user, env = seed()
    for section in (PREFILL, DECODE):
        user[section]["engine_type"] = "sglang"
    problems = issues_of(kv_routed(user), env)
    message = problems[f"{PREFILL}.engine_type"]
    assert "not 'sglang'" in message and "prefix_affinity or load_balance" in message


@pytest.mark.parametrize(
    ("option", "value", "fix"),
    [
        ("prefix_caching_hash_algo", "xxhash", "sha256 or sha256_cbor"),
        ("tokenizer_mode", "mistral", "auto / hf / slow"),
        ("block_size", None, "set the KV block size"),
        ("model", None, "set model to it"),
    ],
)
def test_vllm_settings_the_coordinator_cannot_follow_are_refused_at_their_path(
    option: str, value: str | None, fix: str
) -> None:
    user, env = seed()
    config = engine_config(user)
    if value is None:
        config.pop(option)
    else:
        config[option] = value
    problems = issues_of(kv_routed(user), env)
    assert fix in problems[f"{PREFILL}.engine_config.{option}"]


def test_the_rules_hold_only_under_kv_cache_affinity() -> None:
    user, env = seed()
    engine_config(user).pop("block_size")
    engine_config(user, DECODE).pop("block_size")
    engine_config(user)["tokenizer_mode"] = "mistral"
    assert load_documents(user, env).profile is not None


def test_prefill_and_decode_that_hash_apart_with_the_pool_are_refused() -> None:
    user, env = seed()
    engine_config(user, DECODE)["prefix_caching_hash_algo"] = "sha256_cbor"
    problems = issues_of(kv_routed(user), env)
    message = problems[f"{DECODE}.engine_config.prefix_caching_hash_algo"]
    assert "'sha256_cbor' differs from the prefill side's 'sha256'" in message
    engine_config(user)["prefix_caching_hash_algo"] = "sha256_cbor"
    assert load_documents(user, env).profile is not None


def test_a_sim_engine_needs_no_model_nor_block_size_but_a_hash_motor_computes() -> None:
    user, env = aggregated()
    assert load_documents(kv_routed(user), env).profile is not None
    engine_config(user, "motor_engine_union_config")["prefix_caching_hash_algo"] = "xxhash_cbor"
    problems = issues_of(user, env)
    assert "not 'xxhash_cbor'" in problems["motor_engine_union_config.engine_config.prefix_caching_hash_algo"]
