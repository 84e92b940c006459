"""Whitelist diff for --update-config / --update-instance-num."""

import copy
import json
from pathlib import Path

from motor.config.whitelist import (
    SCALE_WHITELIST,
    UPDATE_WHITELIST,
    changed_paths,
    is_allowed,
    refused_changes,
)

SEED = Path(__file__).resolve().parents[2] / "examples" / "infer_engines" / "vllm" / "user_config.json"


def seed() -> dict:
    return json.loads(SEED.read_text())


def test_identical_documents_have_no_changes() -> None:
    assert changed_paths(seed(), seed()) == []


def test_scalar_change_reports_dotted_path() -> None:
    new = seed()
    new["motor_coordinator_config"]["exception_config"]["max_retry"] = 7
    assert changed_paths(new, seed()) == ["motor_coordinator_config.exception_config.max_retry"]


def test_added_section_expands_to_its_leaves() -> None:
    new = seed()
    new["motor_coordinator_config"]["timeout_config"] = {"read_timeout": 20, "write_timeout": 20}
    assert changed_paths(new, seed()) == [
        "motor_coordinator_config.timeout_config.read_timeout",
        "motor_coordinator_config.timeout_config.write_timeout",
    ]
    assert refused_changes(new, seed(), UPDATE_WHITELIST) == []


def test_removed_section_expands_to_its_leaves() -> None:
    old = seed()
    new = copy.deepcopy(old)
    del new["motor_controller_config"]["instance_config"]
    assert changed_paths(new, old) == [
        "motor_controller_config.instance_config.instance_expired_timeout",
        "motor_controller_config.instance_config.instance_heartbeat_timeout",
    ]


def test_list_element_and_length_changes() -> None:
    old = seed()
    connectors_path = (
        "motor_engine_prefill_config.engine_config.kv_transfer_config.kv_connector_extra_config.connectors"
    )
    changed = copy.deepcopy(old)
    extra = changed["motor_engine_prefill_config"]["engine_config"]["kv_transfer_config"][
        "kv_connector_extra_config"
    ]
    extra["connectors"][1]["kv_connector"] = "MooncakeStoreConnector"
    assert changed_paths(changed, old) == [f"{connectors_path}[1].kv_connector"]
    extra["connectors"].append({"kv_connector": "X"})
    assert changed_paths(changed, old) == [connectors_path]


def test_bool_is_not_the_same_as_one() -> None:
    assert changed_paths({"a": True}, {"a": 1}) == ["a"]
    assert changed_paths({"a": 600}, {"a": 600.0}) == []


def test_is_allowed_walks_the_tree_and_strips_indices() -> None:
    assert is_allowed("motor_controller_config.logging_config.log_level", UPDATE_WHITELIST)
    assert is_allowed("motor_coordinator_config.timeout_config.keep_alive_timeout", UPDATE_WHITELIST)
    assert is_allowed("motor_coordinator_config[0].exception_config.retry_delay", UPDATE_WHITELIST)
    assert not is_allowed("motor_coordinator_config.timeout_config", UPDATE_WHITELIST)
    assert not is_allowed("motor_coordinator_config.exception_config.max_retry.x", UPDATE_WHITELIST)
    assert not is_allowed("motor_coordinator_config.scheduler_config.scheduler_type", UPDATE_WHITELIST)
    assert not is_allowed("motor_controller_config", UPDATE_WHITELIST)
    assert not is_allowed("north_config.name", UPDATE_WHITELIST)


def test_refused_changes_lists_offending_paths_sorted() -> None:
    new = seed()
    new["motor_nodemanger_config"]["logging_config"]["log_level"] = "DEBUG"
    new["motor_deploy_config"]["image_name"] = "other:1"
    new["motor_deploy_config"]["p_instances_num"] = 2
    assert refused_changes(new, seed(), UPDATE_WHITELIST) == [
        "motor_deploy_config.image_name",
        "motor_deploy_config.p_instances_num",
    ]
    assert refused_changes(new, seed(), SCALE_WHITELIST) == [
        "motor_deploy_config.image_name",
        "motor_nodemanger_config.logging_config.log_level",
    ]


def test_node_manager_key_spelling_is_not_a_change() -> None:
    new = seed()
    new["motor_nodemanager_config"] = new.pop("motor_nodemanger_config")
    assert changed_paths(new, seed()) == []
