"""pyMotor compatibility: alternate spellings, legacy model_config, known-but-unimplemented keys."""

import pytest

from motor.config import ConfigError, load_documents
from tests.unit.config_cases import seed


def test_nodemanager_spelling_is_accepted():
    user, env = seed()
    user["motor_nodemanager_config"] = user.pop("motor_nodemanger_config")
    user["motor_nodemanager_config"]["basic_config"]["heartbeat_interval_seconds"] = 7
    topology = load_documents(user, env)
    assert topology.user.motor_nodemanger_config.basic_config.heartbeat_interval_seconds == 7


def test_both_nodemanager_spellings_are_an_error():
    user, env = seed()
    user["motor_nodemanager_config"] = {}
    with pytest.raises(ConfigError) as caught:
        load_documents(user, env)
    assert caught.value.issues[0].path == "motor_nodemanager_config"


def test_legacy_model_config_merges_with_engine_config_winning():
    user, env = seed()
    prefill = user["motor_engine_prefill_config"]
    prefill["model_config"] = {
        "model_name": "other-name",
        "model_path": "/mnt/weight/Qwen3-8B",
        "parallel_config": {"dp_size": 2},
    }
    del prefill["engine_config"]["data_parallel_size"]
    topology = load_documents(user, env)
    engine_config = topology.roles["prefill"].engine_config
    assert engine_config["served_model_name"] == "qwen3-8b"
    assert engine_config["data_parallel_size"] == 2
    assert any("model_config: folded into engine_config" in w for w in topology.warnings)
    assert any("served_model_name='other-name' conflicts" in w for w in topology.warnings)


def test_model_config_takes_the_roles_own_parallel_sizes_under_vllms_names():
    user, env = seed()
    prefill = user["motor_engine_prefill_config"]
    for key in (
        "data_parallel_size",
        "tensor_parallel_size",
        "enable_expert_parallel",
        "data_parallel_rpc_port",
        "gpu_memory_utilization",
    ):
        prefill["engine_config"].pop(key, None)
        prefill["engine_config"].pop(key.replace("_", "-"), None)
    prefill["model_config"] = {
        "npu_mem_utils": 0.8,
        "parallel_config": {"dp_size": 8},
        "prefill_parallel_config": {
            "dp_size": 1,
            "tp_size": 2,
            "pp_size": 1,
            "enable_ep": True,
            "dp_rpc_port": 9000,
            "world_size": 4,
        },
        "decode_parallel_config": {"dp_size": 4},
    }
    topology = load_documents(user, env)
    engine_config = topology.roles["prefill"].engine_config
    assert (engine_config["data_parallel_size"], engine_config["tensor_parallel_size"]) == (1, 2)
    assert engine_config["enable_expert_parallel"] is True and engine_config["data_parallel_rpc_port"] == 9000
    assert engine_config["gpu_memory_utilization"] == 0.8 and "world_size" not in engine_config
    warnings = "\n".join(topology.warnings)
    assert "model_config.decode_parallel_config: not this section's role; ignored" in warnings
    assert "world_size 4 is not dp_size × tp_size × pp_size (2); ignored" in warnings


def test_model_config_of_an_sglang_section_uses_sglangs_option_names():
    user, env = seed()
    for section in ("motor_engine_prefill_config", "motor_engine_decode_config"):
        user[section]["engine_type"] = "sglang"
        user[section]["engine_config"] = {}
        user[section]["model_config"] = {
            "model_name": "qwen3-8B",
            "model_path": "/mnt/weight/Qwen3-8B",
            "npu_mem_utils": 0.9,
            "parallel_config": {
                "dp_size": 1,
                "tp_size": 2,
                "pp_size": 1,
                "world_size": 2,
                "dp_rpc_port": 9000,
            },
        }
    topology = load_documents(user, env)
    engine_config = topology.roles["prefill"].engine_config
    assert engine_config == {
        "served_model_name": "qwen3-8B",
        "model_path": "/mnt/weight/Qwen3-8B",
        "mem_fraction_static": 0.9,
        "dp_size": 1,
        "tp_size": 2,
        "pp_size": 1,
    }
    assert any("dp_rpc_port has no sglang option; ignored" in w for w in topology.warnings)


def test_unimplemented_pymotor_keys_warn_instead_of_failing():
    user, env = seed()
    user["motor_coordinator_config"]["exception_config"]["connect_timeout"] = 3
    user["motor_controller_config"]["observability_config"] = {"observability_enable": False}
    user["north_config"] = {"name": "x"}
    env["motor_mf_store_env"] = {}
    topology = load_documents(user, env)
    joined = "\n".join(topology.warnings)
    assert (
        "motor_coordinator_config.exception_config.connect_timeout: pyMotor setting not implemented" in joined
    )
    assert "motor_controller_config.observability_config" in joined
    assert "north_config" in joined
    assert "env.json:motor_mf_store_env" in joined


def test_kv_cache_affinity_is_its_own_policy_and_folds_the_flat_aliases():
    user, env = seed()
    scheduler = user["motor_coordinator_config"]["scheduler_config"]
    scheduler["scheduler_type"] = "kv_cache_affinity"
    scheduler["kv_affinity_mode"] = "load_gated"
    scheduler["kv_affinity_w_cpu"] = 0.5
    scheduler["kv_affinity"] = {"w_cpu": 0.25}
    config = load_documents(user, env).user.motor_coordinator_config.scheduler_config
    assert config.scheduler_type == "kv_cache_affinity"
    assert config.kv_affinity.mode == "load_gated"
    assert config.kv_affinity.w_cpu == 0.25  # the nested key wins


def test_kv_conductor_config_is_validated_and_reported_as_not_deployed():
    user, env = seed()
    user["kv_conductor_config"] = {
        "kvevent_instance": {"mooncake_master": {"type": "Mooncake"}},
        "http_server_port": 13333,
    }
    topology = load_documents(user, env)
    assert any(
        w.startswith(
            "kv_conductor_config: pyMotor setting not implemented by motor; motor deploys no KV conductor"
        )
        for w in topology.warnings
    )
    user["kv_conductor_config"] = {"kvevent_instance": {"mooncake_master": {"type": "Mooncake"}}}
    topology = load_documents(user, env)
    assert any(
        w.startswith(
            "kv_conductor_config: pyMotor setting not implemented by motor; motor deploys no KV conductor"
        )
        for w in topology.warnings
    ), "a conductor section without a port is not used either"
    user["kv_conductor_config"] = {}
    assert not any(w.startswith("kv_conductor_config") for w in load_documents(user, env).warnings)
    user["kv_conductor_config"] = {"http_server_port": "lots"}
    with pytest.raises(ConfigError) as caught:
        load_documents(user, env)
    assert caught.value.issues[0].path == "kv_conductor_config.http_server_port"


def test_reschedule_config_and_its_older_spellings():
    user, env = seed()
    exceptions = user["motor_coordinator_config"]["exception_config"]
    exceptions.update(recompute_enabled=True, recompute_max_retry=2, max_retry=4)
    config = load_documents(user, env).user.motor_coordinator_config.exception_config
    assert config.reschedule_config.enable is True
    assert config.replay_retries == 2
    exceptions.pop("recompute_max_retry")
    exceptions["reschedule_config"] = {"enable": False}  # the current key wins over the older one
    config = load_documents(user, env).user.motor_coordinator_config.exception_config
    assert config.reschedule_config.enable is False
    assert config.replay_retries == 4  # transport_max_retry unset: max_retry
