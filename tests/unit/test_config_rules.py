"""Each validation rule: a config that breaks it fails with a message naming the exact JSON path."""

import pytest

from motor.config import ConfigError, load_documents
from motor.kv.connectors import DispatchProfile
from tests.unit.config_cases import aggregated, issues_of, seed, sub, transfer


def test_seed_example_validates_with_pool_defaults_and_decode_first():
    topology = load_documents(*seed())
    assert topology.profile.profile == DispatchProfile.DECODE_FIRST
    assert topology.profile.decided_by == "MooncakeLayerwiseConnector"
    assert topology.pool is not None
    assert topology.pool.port == 50088
    assert topology.pool.default_kv_lease_ttl == 11000
    assert topology.pool.global_segment_size == 1 << 30
    assert topology.warnings == []


@pytest.mark.parametrize(
    "section", ["motor_engine_prefill_env", "motor_engine_decode_env", "motor_common_env"]
)
@pytest.mark.parametrize("var", ["ASCEND_TRANSFER_TIMEOUT", "ASCEND_CONNECT_TIMEOUT"])
def test_lease_must_exceed_every_transfer_timeout(section, var):
    user, env = seed()
    for values in env.values():
        if isinstance(values, dict):
            values.pop(var, None)
    user["kv_cache_pool_config"]["default_kv_lease_ttl"] = 10000
    env[section][var] = "12000"
    issues = issues_of(user, env)
    message = issues["kv_cache_pool_config.default_kv_lease_ttl"]
    assert f"10000 ms must exceed {var}=12000 ms from env.json {section}" in message


def test_lease_equal_to_timeout_fails():
    user, env = seed()
    user["kv_cache_pool_config"]["default_kv_lease_ttl"] = 10000
    assert "kv_cache_pool_config.default_kv_lease_ttl" in issues_of(user, env)


def test_non_numeric_timeout_names_the_env_path():
    user, env = seed()
    env["motor_engine_decode_env"]["ASCEND_TRANSFER_TIMEOUT"] = "soon"
    assert (
        "not a number (ms)"
        in issues_of(user, env)["env.json:motor_engine_decode_env.ASCEND_TRANSFER_TIMEOUT"]
    )


def test_wrong_kv_role_is_corrected_from_the_role_on_each_level_with_a_warning():
    user, env = seed()
    transfer(user, "prefill")["kv_role"] = "kv_consumer"
    sub(user, "decode", 1)["kv_role"] = "kv_producer"
    topology = load_documents(user, env)
    prefill = topology.roles["prefill"].engine_config["kv_transfer_config"]
    decode = topology.roles["decode"].engine_config["kv_transfer_config"]
    assert prefill["kv_role"] == "kv_producer"
    assert decode["kv_connector_extra_config"]["connectors"][1]["kv_role"] == "kv_consumer"
    path = "motor_engine_decode_config.engine_config.kv_transfer_config.kv_connector_extra_config.connectors[1].kv_role"
    assert f"{path}: 'kv_producer' replaced by 'kv_consumer'" in "\n".join(topology.warnings)
    assert any(
        w.startswith(
            "motor_engine_prefill_config.engine_config.kv_transfer_config.kv_role: 'kv_consumer' replaced"
        )
        for w in topology.warnings
    )


def test_pool_backend_may_keep_kv_both():
    user, env = seed()
    sub(user, "prefill", 1)["kv_role"] = "kv_both"
    topology = load_documents(user, env)
    connectors = topology.roles["prefill"].engine_config["kv_transfer_config"]["kv_connector_extra_config"]
    assert connectors["connectors"][1]["kv_role"] == "kv_both"
    assert not any("kv_role" in warning for warning in topology.warnings)


def test_missing_kv_roles_are_filled():
    user, env = seed()
    del transfer(user, "prefill")["kv_role"]
    del sub(user, "decode", 0)["kv_role"]
    topology = load_documents(user, env)
    prefill = topology.roles["prefill"].engine_config["kv_transfer_config"]
    decode = topology.roles["decode"].engine_config["kv_transfer_config"]
    assert prefill["kv_role"] == "kv_producer"
    assert decode["kv_connector_extra_config"]["connectors"][0]["kv_role"] == "kv_consumer"


def test_multiconnector_needs_a_sub_connector():
    user, env = seed()
    transfer(user, "prefill")["kv_connector_extra_config"]["connectors"] = []
    path = "motor_engine_prefill_config.engine_config.kv_transfer_config.kv_connector_extra_config.connectors"
    assert "at least one sub-connector" in issues_of(user, env)[path]


def test_pd_transfer_connectors_must_match():
    user, env = seed()
    connectors = transfer(user, "decode")["kv_connector_extra_config"]["connectors"]
    connectors.reverse()
    path = "motor_engine_decode_config.engine_config.kv_transfer_config.kv_connector_extra_config.connectors[0].kv_connector"
    message = issues_of(user, env)[path]
    assert "decode's transfer connector 'AscendStoreConnector' must be the prefill side's" in message
    assert "'MooncakeLayerwiseConnector'" in message


def test_each_engine_has_its_own_kv_port():
    user, env = seed()
    sub(user, "decode", 0)["kv_port"] = "30002"
    load_documents(user, env)


def test_pool_level_may_be_one_sided():
    user, env = seed()
    decode = user["motor_engine_decode_config"]["engine_config"]
    decode["kv_transfer_config"] = dict(sub(user, "decode", 0))
    topology = load_documents(user, env)
    assert topology.pool is not None
    assert topology.roles["decode"].engine_config["kv_transfer_config"]["kv_role"] == "kv_consumer"
    decode["kv_transfer_config"]["kv_connector"] = "NixlConnector"
    path = "motor_engine_decode_config.engine_config.kv_transfer_config.kv_connector"
    assert "must be the prefill side's 'MooncakeLayerwiseConnector'" in issues_of(user, env)[path]


def test_only_connectors_zero_decides_and_pool_backends_need_no_whitelisting():
    user, env = seed()
    for role in ("prefill", "decode"):
        sub(user, role, 1)["kv_connector"] = "SomeVendorStoreConnector"
    assert load_documents(user, env).profile.decided_by == "MooncakeLayerwiseConnector"


def test_unknown_transfer_connector_names_it_and_the_escape_hatch():
    user, env = seed()
    for role in ("prefill", "decode"):
        sub(user, role, 0)["kv_connector"] = "FancyConnector"
    path = "motor_engine_prefill_config.engine_config.kv_transfer_config.kv_connector_extra_config.connectors[0].kv_connector"
    message = issues_of(user, env)[path]
    assert "'FancyConnector'" in message
    assert "motor_coordinator_config.scheduler_config.dispatch_profile" in message


@pytest.mark.parametrize(
    ("key", "value", "profile", "warning"),
    [
        pytest.param(
            "dispatch_profile",
            "prefill_first",
            DispatchProfile.PREFILL_FIRST,
            "overrides decode_first",
            id="explicit-dispatch-profile-wins-when-it-contradicts",
        ),
        pytest.param(
            "deploy_mode",
            "cpcd_separate",
            DispatchProfile.DECODE_FIRST,
            "deploy_mode: 'cpcd_separate' means prefill_first",
            id="legacy-deploy-mode-mismatch-does-not-decide",
        ),
    ],
)
def test_scheduler_setting_against_the_connectors_warns(key, value, profile, warning):
    user, env = seed()
    user["motor_coordinator_config"]["scheduler_config"][key] = value
    topology = load_documents(user, env)
    assert topology.profile.profile == profile
    assert any(warning in message for message in topology.warnings)


def test_explicit_dispatch_profile_allows_unknown_connector():
    user, env = seed()
    user["motor_coordinator_config"]["scheduler_config"]["dispatch_profile"] = "concurrent"
    for role in ("prefill", "decode"):
        sub(user, role, 0)["kv_connector"] = "FancyConnector"
    assert load_documents(user, env).profile.profile == DispatchProfile.CONCURRENT


@pytest.mark.parametrize(
    ("connector", "profile"),
    [
        ("MooncakeConnectorV1", DispatchProfile.PREFILL_FIRST),
        ("NixlConnector", DispatchProfile.PREFILL_FIRST),
        ("ExampleConnector", DispatchProfile.PREFILL_FIRST),
        ("P2pNcclConnector", DispatchProfile.PREFILL_FIRST),
        ("MooncakeHybridConnector", DispatchProfile.PREFILL_FIRST),
        ("MooncakeConnector", DispatchProfile.CONCURRENT),
        ("MooncakeStoreConnector", DispatchProfile.PREFILL_FIRST),
    ],
)
def test_whitelist_profiles(connector, profile):
    user, env = seed()
    for role in ("prefill", "decode"):
        sub(user, role, 0)["kv_connector"] = connector
    assert load_documents(user, env).profile.profile == profile


def test_sglang_is_concurrent():
    user, env = seed()
    for role in ("prefill", "decode"):
        user[f"motor_engine_{role}_config"]["engine_type"] = "sglang"
    assert load_documents(user, env).profile.profile == DispatchProfile.CONCURRENT


def test_union_without_connector_is_aggregated():
    topology = load_documents(*aggregated())
    assert topology.profile.profile == DispatchProfile.AGGREGATED
    assert topology.roles["union"].instances == 2


def test_pool_backend_without_pool_config_is_an_error():
    user, env = seed()
    del user["kv_cache_pool_config"]
    path = "motor_engine_prefill_config.engine_config.kv_transfer_config.kv_connector_extra_config.connectors[1].kv_connector"
    assert "kv_cache_pool_config is missing" in issues_of(user, env)[path]


def test_pool_on_with_only_pool_config():
    user, env = seed()
    for role in ("prefill", "decode"):
        user[f"motor_engine_{role}_config"]["engine_config"]["kv_transfer_config"] = {
            "kv_connector": "NixlConnector"
        }
    assert load_documents(user, env).pool is not None


def test_pool_off_without_backend_and_config():
    user, env = seed()
    del user["kv_cache_pool_config"]
    for role in ("prefill", "decode"):
        user[f"motor_engine_{role}_config"]["engine_config"]["kv_transfer_config"] = {
            "kv_connector": "NixlConnector"
        }
    topology = load_documents(user, env)
    assert topology.pool is None
    assert "PYTHONHASHSEED" not in topology.roles["prefill"].env


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("eviction_ratio", 0, "greater than 0"),
        ("eviction_high_watermark_ratio", 1.5, "less than or equal to 1"),
        ("global_segment_size", "0GB", "greater than 0"),
        ("global_segment_size", "lots", "is not a size"),
        ("port", 70000, "less than or equal to 65535"),
        ("protocl", "tcp", "unknown key"),
    ],
)
def test_pool_values(key, value, message):
    user, env = seed()
    user["kv_cache_pool_config"][key] = value
    assert message in issues_of(user, env)[f"kv_cache_pool_config.{key}"]


@pytest.mark.parametrize(
    ("key", "value"), [("p_instances_num", 0), ("d_instances_num", 17), ("p_instances_num", "two")]
)
def test_instance_counts(key, value):
    user, env = seed()
    user["motor_deploy_config"][key] = value
    assert f"motor_deploy_config.{key}" in issues_of(user, env)


def test_pd_counts_required():
    user, env = seed()
    del user["motor_deploy_config"]["d_instances_num"]
    assert "required (1..16)" in issues_of(user, env)["motor_deploy_config.d_instances_num"]


def test_infer_service_set_is_accepted_with_a_notice():
    user, env = seed()
    user["motor_deploy_config"]["deploy_mode"] = "infer_service_set"
    topology = load_documents(user, env)
    assert topology.user.motor_deploy_config.kubernetes_layout == "multi_deployment"
    assert any(
        "InferServiceSet custom resource itself belongs to MindCluster" in w for w in topology.warnings
    )


def test_job_id_must_be_a_dns_label():
    user, env = seed()
    user["motor_deploy_config"]["job_id"] = "Motor_Job"
    assert "motor_deploy_config.job_id" in issues_of(user, env)


def test_unknown_keys_are_reported_outside_engine_config_only():
    user, env = seed()
    user["motor_coordinator_config"]["exception_config"]["max_retires"] = 3
    user["motor_engine_prefill_config"]["engine_config"]["some_future_vllm_flag"] = True
    issues = issues_of(user, env)
    assert issues == {
        "motor_coordinator_config.exception_config.max_retires": (
            "unknown key (did you mean 'max_retry'?); check its spelling or remove it"
        )
    }


def test_engine_config_passes_through_untouched():
    user, env = seed()
    user["motor_engine_prefill_config"]["engine_config"]["some-future-flag"] = {"a": [1, 2]}
    topology = load_documents(user, env)
    assert topology.roles["prefill"].engine_config["some-future-flag"] == {"a": [1, 2]}


def test_local_port_collisions():
    user, env = seed()
    user["motor_deploy_config"]["deploy_mode"] = "local"
    user["motor_controller_config"]["api_config"] = {"controller_api_port": 1025}
    message = issues_of(user, env)["motor_controller_config.api_config.controller_api_port"]
    assert "port 1025 for controller is already used by coordinator (OpenAI API)" in message


def test_local_default_ports_do_not_collide():
    user, env = seed()
    user["motor_deploy_config"].update(deploy_mode="local", p_instances_num=3, d_instances_num=2)
    ports = [use.port for use in load_documents(user, env).ports]
    assert len(ports) == len(set(ports))


@pytest.mark.parametrize("key", ["model", "served_model_name", "block_size", "dtype", "kv_cache_dtype"])
def test_pd_engine_compatibility(key):
    user, env = seed()
    user["motor_engine_decode_config"]["engine_config"][key] = "something-else"
    assert (
        "differs from the prefill side's"
        in issues_of(user, env)[f"motor_engine_decode_config.engine_config.{key}"]
    )


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("max_model_len", 65536),
        ("max_num_seqs", 4),
        ("gpu_memory_utilization", 0.5),
        ("tensor_parallel_size", 4),
        ("model", "/mnt/weight/Qwen3-8B/"),
        ("dtype", "auto"),
    ],
)
def test_pd_may_differ_where_the_kv_layout_does_not(key, value):
    user, env = seed()
    user["motor_engine_decode_config"]["engine_config"][key] = value
    load_documents(user, env)


def test_kv_cache_dtype_decides_over_the_model_dtype():
    user, env = seed()
    decode = user["motor_engine_decode_config"]["engine_config"]
    decode["dtype"] = "float16"
    assert "motor_engine_decode_config.engine_config.dtype" in issues_of(user, env)
    decode["kv_cache_dtype"] = "bfloat16"
    load_documents(user, env)


def test_compatibility_reads_dashed_keys():
    user, env = seed()
    config = user["motor_engine_decode_config"]["engine_config"]
    del config["block_size"]
    config["block-size"] = 64
    assert "motor_engine_decode_config.engine_config.block_size" in issues_of(user, env)


def test_pythonhashseed_defaults_to_zero_with_pool():
    topology = load_documents(*seed())
    assert {spec.env["PYTHONHASHSEED"] for spec in topology.roles.values()} == {"0"}


def test_pythonhashseed_user_value_is_kept_when_consistent():
    user, env = seed()
    env["motor_common_env"]["PYTHONHASHSEED"] = "42"
    topology = load_documents(user, env)
    assert {spec.env["PYTHONHASHSEED"] for spec in topology.roles.values()} == {"42"}


def test_pythonhashseed_conflict_is_an_error():
    user, env = seed()
    env["motor_engine_prefill_env"]["PYTHONHASHSEED"] = "1"
    env["motor_engine_decode_env"]["PYTHONHASHSEED"] = "2"
    message = issues_of(user, env)["env.json:PYTHONHASHSEED"]
    assert "'1' in motor_engine_prefill_env" in message
    assert "'2' in motor_engine_decode_env" in message


def test_kv_load_failure_policy_belongs_on_top_level():
    user, env = seed()
    sub(user, "prefill", 0)["kv_load_failure_policy"] = "recompute"
    path = (
        "motor_engine_prefill_config.engine_config.kv_transfer_config.kv_connector_extra_config.connectors[0]"
        ".kv_load_failure_policy"
    )
    assert "belongs on the top-level MultiConnector" in issues_of(user, env)[path]


def test_kv_load_failure_policy_on_top_level_is_fine():
    user, env = seed()
    transfer(user, "prefill")["kv_load_failure_policy"] = "recompute"
    load_documents(user, env)


def test_transfer_config_as_json_string():
    user, env = seed()
    import json

    config = user["motor_engine_prefill_config"]["engine_config"]
    config["kv_transfer_config"] = json.dumps(config["kv_transfer_config"])
    assert load_documents(user, env).profile.profile == DispatchProfile.DECODE_FIRST
    config["kv_transfer_config"] = "{not json"
    assert (
        "not valid JSON"
        in issues_of(user, env)["motor_engine_prefill_config.engine_config.kv_transfer_config"]
    )


def test_all_errors_are_collected():
    user, env = seed()
    user["motor_deploy_config"]["p_instances_num"] = 0
    user["kv_cache_pool_config"]["eviction_ratio"] = 2
    env["motor_common_env"]["X"] = ["list"]
    with pytest.raises(ConfigError) as caught:
        load_documents(user, env)
    assert len(caught.value.issues) == 3


def test_versions_are_checked():
    user, env = seed()
    user["version"] = "v1.0"
    env["version"] = "1"
    issues = issues_of(user, env)
    assert "version" in issues
    assert "env.json:version" in issues


def test_accelerator_protocol_on_cpu_is_an_error():
    user, env = seed()
    user["motor_deploy_config"]["hardware_type"] = "cpu"
    assert 'set "protocol": "tcp"' in issues_of(user, env)["kv_cache_pool_config.protocol"]
    user["kv_cache_pool_config"]["protocol"] = "tcp"
    load_documents(user, env)


def test_lease_must_exceed_the_mooncake_connector_timeout_in_seconds():
    user, env = seed()
    env["motor_engine_decode_env"]["VLLM_MOONCAKE_CONNECTOR_TIMEOUT"] = "10"
    load_documents(user, env)
    env["motor_engine_decode_env"]["VLLM_MOONCAKE_CONNECTOR_TIMEOUT"] = "30"
    message = issues_of(user, env)["kv_cache_pool_config.default_kv_lease_ttl"]
    assert (
        "11000 ms must exceed VLLM_MOONCAKE_CONNECTOR_TIMEOUT=30 s from env.json motor_engine_decode_env"
        in message
    )


def test_local_kv_bootstrap_ports_are_checked_per_producer_instance():
    user, env = seed()
    user["motor_deploy_config"].update(deploy_mode="local", hardware_type="cpu", p_instances_num=2)
    user["kv_cache_pool_config"]["protocol"] = "tcp"
    for role in ("prefill", "decode"):
        sub(user, role, 0)["kv_connector"] = "MooncakeConnector"
        sub(user, role, 0)["kv_port"] = "10000"
    issues = issues_of(user, env)
    assert "port 10001 for KV bootstrap prefill-1 is already used by engine prefill-0 status" in "\n".join(
        issues.values()
    )
    for role in ("prefill", "decode"):
        sub(user, role, 0)["kv_port"] = "20900"
    bootstrap = [
        use.port for use in load_documents(user, env).ports if use.component.startswith("KV bootstrap")
    ]
    assert bootstrap == [20900, 20901]
