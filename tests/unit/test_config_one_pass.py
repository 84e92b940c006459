"""One pass reports every problem (sorted, no cascades, did-you-mean, strict types); deploy modes and targets;
pyMotor's hardware types; kv_cache_store_config; pool keys passed through."""

import pytest

from motor.config import ConfigError, load_documents
from motor.kv.connectors import DispatchProfile
from motor.kv.pool import engine_store_config
from tests.unit.config_cases import seed


def problems(user, env) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_documents(user, env)
    return [str(issue) for issue in caught.value.issues]


def test_five_mistakes_give_five_messages_sorted_by_path():
    user, env = seed()
    deploy = user["motor_deploy_config"]
    deploy["p_instances_num"] = True
    deploy["job_id"] = "Mindie_Motor"
    deploy["hardwre_type"] = "800I_A3"
    user["motor_coordinator_config"]["api_config"] = {"coordinator_api_infer_port": 1026}
    user["motor_engine_decode_config"]["engine_config"]["served_model_name"] = "other"
    found = problems(user, env)
    assert len(found) == 5, found
    assert found == sorted(found)
    joined = "\n".join(found)
    assert "motor_deploy_config.p_instances_num: must be an integer, not True" in joined
    assert "motor_deploy_config.hardwre_type: unknown key (did you mean 'hardware_type'?)" in joined
    assert "not a DNS-1123 label: lowercase letters, digits and '-'" in joined
    assert "coordinator_api_mgmt_port: port 1026 for coordinator (management) is already used" in joined
    assert "motor_engine_decode_config.engine_config.served_model_name: 'other' differs" in joined


def test_a_refused_value_is_not_reported_again_by_the_rules():
    user, env = seed()
    user["motor_deploy_config"]["hardware_type"] = "800I-A3"
    found = problems(user, env)
    assert len(found) == 1, found
    assert "'800I-A3' is not a hardware type pyMotor or motor knows (did you mean '800I_A3'?)" in found[0]
    assert "950-SuperPod-Atlas-8" in found[0]


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("p_instances_num", 1.0, "must be an integer, not 1.0"),
        ("p_instances_num", "1", "must be an integer, not '1'"),
        ("p_pod_npu_num", False, "must be an integer, not False"),
    ],
)
def test_numbers_are_strict(key, value, expected):
    user, env = seed()
    user["motor_deploy_config"][key] = value
    assert f"motor_deploy_config.{key}: {expected}" in problems(user, env)


def test_booleans_are_strict():
    user, env = seed()
    user["motor_coordinator_config"]["api_key_config"] = {"enable_api_key": "yes"}
    assert (
        "motor_coordinator_config.api_key_config.enable_api_key: must be true or false, not 'yes'"
        in problems(user, env)
    )


def test_missing_version_is_reported_and_the_rest_still_checked():
    user, env = seed()
    del user["version"]
    user["motor_deploy_config"]["d_instances_num"] = 0
    paths = [problem.split(":")[0] for problem in problems(user, env)]
    assert paths == ["motor_deploy_config.d_instances_num", "version"]


@pytest.mark.parametrize(
    "hardware",
    ["800I_A2", "800T_A2", "800T_A3", "350-Atlas-4p-16", "850-SuperPod-Atlas-8", "950-SuperPod-Atlas-8"],
)
def test_every_pymotor_hardware_type_is_accepted(hardware):
    user, env = seed()
    user["motor_deploy_config"]["hardware_type"] = hardware
    assert load_documents(user, env).user.motor_deploy_config.hardware_type == hardware


def test_coordinator_ports_must_differ_in_multi_deployment():
    user, env = seed()
    user["motor_coordinator_config"]["api_config"] = {
        "coordinator_api_infer_port": 2000,
        "coordinator_api_mgmt_port": 2000,
    }
    assert any("in the same coordinator pod" in problem for problem in problems(user, env))


def test_engine_ports_must_differ_within_the_pod():
    user, env = seed()
    user["motor_nodemanger_config"]["api_config"] = {"node_manager_port": 10001}
    found = "\n".join(problems(user, env))
    assert "engine status (base_port + 1)" in found and "prefill engine pod" in found


@pytest.mark.parametrize("image", [None, "", "  "])
@pytest.mark.parametrize("mode", ["multi_deployment", "infer_service_set", "single_container"])
def test_image_name_is_required_for_kubernetes_modes(mode, image):
    user, env = seed()
    deploy = user["motor_deploy_config"]
    deploy["deploy_mode"] = mode
    if image is None:
        del deploy["image_name"]
    else:
        deploy["image_name"] = image
    assert any(problem.startswith("motor_deploy_config.image_name: ") for problem in problems(user, env))


def test_no_deploy_mode_reports_which_targets_fit():
    user, env = seed()
    del user["motor_deploy_config"]["deploy_mode"]
    user["motor_deploy_config"]["single_d_instance_pod_num"] = 2
    topology = load_documents(user, env)
    local, kubernetes = topology.fit("local"), topology.fit("kubernetes")
    assert kubernetes.fits and not local.fits
    assert "decode instances need 2 pods" in local.describe()
    assert local.describe().startswith("local: no (")


def test_no_deploy_mode_fails_only_when_no_target_fits():
    user, env = seed()
    deploy = user["motor_deploy_config"]
    del deploy["deploy_mode"], deploy["image_name"]
    deploy["single_d_instance_pod_num"] = 2
    (problem,) = problems(user, env)
    assert problem.startswith("motor_deploy_config.deploy_mode: not set, and no target can run this topology")
    assert "image_name" in problem and "decode instances need 2 pods" in problem


def test_explicit_local_keeps_the_local_rules():
    user, env = seed()
    user["motor_deploy_config"].update(deploy_mode="local", single_d_instance_pod_num=2)
    assert any(
        problem.startswith("motor_deploy_config.single_d_instance_pod_num:")
        for problem in problems(user, env)
    )


def test_kv_cache_store_config_is_the_pool_under_its_newer_name():
    user, env = seed()
    store = user.pop("kv_cache_pool_config")
    store.update(backend="memcache", store_mode="standalone", prefer_alloc_in_same_node=True)
    user["kv_cache_store_config"] = store
    topology = load_documents(user, env)
    assert topology.pool is not None and topology.pool.global_segment_size == 1 << 30
    assert engine_store_config(topology.pool, master_host="h")["prefer_alloc_in_same_node"] is True
    joined = "\n".join(topology.warnings)
    assert "kv_cache_store_config.backend: 'memcache' is not deployed by motor" in joined
    assert "kv_cache_store_config.store_mode: pyMotor setting not implemented" in joined
    user["kv_cache_pool_config"] = {"protocol": "ascend"}
    assert any(problem.startswith("kv_cache_store_config: given together") for problem in problems(user, env))


def test_pool_keys_motor_does_not_know_pass_through_unless_misspelt():
    user, env = seed()
    user["kv_cache_pool_config"]["replica_num"] = 2
    topology = load_documents(user, env)
    assert engine_store_config(topology.pool, master_host="h")["replica_num"] == 2
    user["kv_cache_pool_config"]["eviction_ratoi"] = 0.2
    assert any("did you mean 'eviction_ratio'" in problem for problem in problems(user, env))


@pytest.mark.parametrize(("name", "profile"), [("handoff", "prefill_first"), ("trigger", "decode_first")])
def test_engine_level_dispatch_profile_uses_pymotor_names(name, profile):
    user, env = seed()
    user["motor_engine_prefill_config"]["dispatch_profile"] = name
    user["motor_engine_decode_config"]["dispatch_profile"] = name
    resolution = load_documents(user, env).profile
    assert resolution.profile == DispatchProfile(profile)
    assert resolution.decided_by == "motor_engine_prefill_config.dispatch_profile"


def test_ucm_store_on_prefill_only_needs_no_pool():
    user, env = seed()
    del user["kv_cache_pool_config"]
    prefill = user["motor_engine_prefill_config"]["engine_config"]["kv_transfer_config"]
    prefill["kv_connector_extra_config"]["connectors"][1] = {
        "kv_connector": "UCMConnector",
        "kv_role": "kv_both",
    }
    decode = user["motor_engine_decode_config"]["engine_config"]
    decode["kv_transfer_config"] = decode["kv_transfer_config"]["kv_connector_extra_config"]["connectors"][0]
    topology = load_documents(user, env)
    assert topology.pool is None
    connectors = topology.roles["prefill"].engine_config["kv_transfer_config"]["kv_connector_extra_config"]
    assert connectors["connectors"][1]["kv_role"] == "kv_both"
