"""The encode (EPD) role in the config: pyMotor's keys, ec_transfer_config filled per role and the topology
rules, each failure naming its JSON path."""

import copy
from typing import Any

import pytest

from motor.config import load_documents
from tests.unit.config_cases import aggregated, issues_of, seed

STORAGE = "/dev/shm/motor-ec"
EC = {"ec_connector": "ECExampleConnector", "ec_connector_extra_config": {"shared_storage_path": STORAGE}}


def epd(count: int = 2, ec: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    user, env = seed()
    user["motor_deploy_config"].update(e_instances_num=count, single_e_instance_pod_num=1, e_pod_npu_num=1)
    model = user["motor_engine_prefill_config"]["engine_config"]["model"]
    user["motor_engine_encode_config"] = {
        "engine_type": "vllm",
        "engine_config": {"model": model, "ec_transfer_config": copy.deepcopy(EC if ec is None else ec)},
    }
    return user, env


def test_encode_instances_get_a_role_of_their_own_with_ec_roles_filled_on_both_sides() -> None:
    user, env = epd()
    env["motor_engine_encode_env"] = {"ENCODER_ONLY": "1"}
    topology = load_documents(user, env)
    encode, prefill = topology.roles["encode"], topology.roles["prefill"]
    assert (encode.instances, encode.pods_per_instance, encode.section_path) == (
        2,
        1,
        "motor_engine_encode_config",
    )
    assert encode.engine_config["ec_transfer_config"] == {**EC, "ec_role": "ec_producer"}
    assert prefill.engine_config["ec_transfer_config"] == {**EC, "ec_role": "ec_consumer"}
    assert "ec_transfer_config" not in topology.roles["decode"].engine_config
    assert encode.env["ENCODER_ONLY"] == "1" and "ENCODER_ONLY" not in prefill.env
    (shared,) = [warning for warning in topology.warnings if "encode" in warning]
    assert shared.startswith(
        "motor_engine_encode_config.engine_config.ec_transfer_config.ec_connector_extra_config"
    )
    assert "must see the same directory there" in shared  # multi_deployment: the pods share no directory


def test_a_local_epd_deployment_has_no_shared_storage_warning() -> None:
    user, env = epd()
    user["motor_deploy_config"]["deploy_mode"] = "local"
    topology = load_documents(user, env)
    assert set(topology.roles) == {"prefill", "decode", "encode"}
    assert not [warning for warning in topology.warnings if "encode" in warning]


def test_a_prefill_side_ec_config_must_agree_with_the_encode_side() -> None:
    user, env = epd()
    user["motor_engine_prefill_config"]["engine_config"]["ec_transfer_config"] = {
        "ec_connector": "ECExampleConnector",
        "ec_role": "ec_producer",
        "ec_connector_extra_config": {"shared_storage_path": "/elsewhere"},
    }
    path = "motor_engine_prefill_config.engine_config.ec_transfer_config.ec_connector_extra_config"
    assert (
        "differs from the encode side's '/dev/shm/motor-ec'"
        in issues_of(user, env)[f"{path}.shared_storage_path"]
    )
    user["motor_engine_prefill_config"]["engine_config"]["ec_transfer_config"]["ec_connector"] = (
        "ECCPUConnector"
    )
    assert (
        "differs from the encode side's 'ECExampleConnector'"
        in issues_of(user, env)["motor_engine_prefill_config.engine_config.ec_transfer_config.ec_connector"]
    )


def test_a_configured_ec_role_is_replaced_with_a_warning() -> None:
    user, env = epd(ec={**EC, "ec_role": "ec_consumer"})
    topology = load_documents(user, env)
    assert topology.roles["encode"].engine_config["ec_transfer_config"]["ec_role"] == "ec_producer"
    assert any("'ec_consumer' replaced by 'ec_producer'" in warning for warning in topology.warnings)


@pytest.mark.parametrize(
    ("ec", "path", "message"),
    [
        ({}, "ec_transfer_config.ec_connector", "required: the EC connector's name"),
        (
            {"ec_connector": "ECExampleConnector"},
            "ec_connector_extra_config.shared_storage_path",
            "required by",
        ),
        ({**EC, "ec_role": "ec_sideways"}, "ec_transfer_config.ec_role", "is not one of ec_producer"),
        ("{not json", "ec_transfer_config", "not valid JSON"),
    ],
)
def test_a_broken_encode_ec_config_names_its_path(ec: Any, path: str, message: str) -> None:
    user, env = epd()
    user["motor_engine_encode_config"]["engine_config"]["ec_transfer_config"] = ec
    found = issues_of(user, env)
    key = next(key for key in found if key.endswith(path))
    assert key.startswith("motor_engine_encode_config.engine_config.") and message in found[key]


def test_every_encode_rule_is_reported_in_one_pass() -> None:
    user, env = epd()
    encode = user["motor_engine_encode_config"]
    encode["engine_type"] = "sglang"
    del encode["engine_config"]["ec_transfer_config"]
    encode["engine_config"]["kv_transfer_config"] = {"kv_connector": "MooncakeConnectorV1"}
    user["motor_deploy_config"]["deploy_mode"] = "single_container"
    found = issues_of(user, env)
    assert "run vllm (or motor's sim)" in found["motor_engine_encode_config.engine_type"]
    assert "single_container does not run encode instances" in found["motor_deploy_config.deploy_mode"]
    assert "not KV: remove it" in found["motor_engine_encode_config.engine_config.kv_transfer_config"]
    assert (
        "required for encode instances"
        in found["motor_engine_encode_config.engine_config.ec_transfer_config"]
    )


def test_encode_instances_need_their_section_and_pd_disaggregation() -> None:
    user, env = seed()
    user["motor_deploy_config"]["e_instances_num"] = 1
    assert "required with e_instances_num" in issues_of(user, env)["motor_engine_encode_config"]
    user, env = aggregated()
    user["motor_deploy_config"]["e_instances_num"] = 1
    user["motor_engine_encode_config"] = {"engine_type": "vllm", "engine_config": {"ec_transfer_config": EC}}
    assert "need PD disaggregation" in issues_of(user, env)["motor_deploy_config.e_instances_num"]


@pytest.mark.parametrize("count", [None, 0])
def test_no_encode_instances_leave_the_section_unused_with_a_warning(count: int | None) -> None:
    user, env = epd()
    if count is None:
        del user["motor_deploy_config"]["e_instances_num"]
    else:
        user["motor_deploy_config"]["e_instances_num"] = count
    topology = load_documents(user, env)
    assert "encode" not in topology.roles
    assert "ec_transfer_config" not in topology.roles["prefill"].engine_config
    assert any(
        warning.startswith("motor_engine_encode_config: e_instances_num") for warning in topology.warnings
    )


def test_an_unknown_ec_connector_passes_with_a_warning() -> None:
    user, env = epd(ec={"ec_connector": "ECFutureConnector"})
    topology = load_documents(user, env)
    assert topology.roles["encode"].engine_config["ec_transfer_config"]["ec_connector"] == "ECFutureConnector"
    assert any("'ECFutureConnector' is not an EC connector" in warning for warning in topology.warnings)
