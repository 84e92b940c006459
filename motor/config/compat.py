"""pyMotor keys motor knows but does not implement, and the legacy `model_config` engine section.

They are removed before validation and reported as warnings, so a pyMotor config loads while nothing pretends
to honour a field it ignores.
"""

from typing import Any

_LOGGING_EXTRAS = {
    "log_max_line_length",
    "log_format",
    "log_date_format",
    "host_log_dir",
    "log_rotation_size",
    "log_rotation_count",
    "log_compress",
    "log_compress_level",
    "log_max_total_size",
    "log_cleanup_interval",
}

UNSUPPORTED_KEYS: dict[str, set[str]] = {
    "": {"north_config", "motor_engine_encode_config"},
    "motor_deploy_config": {
        "e_instances_num",
        "single_e_instance_pod_num",
        "e_pod_npu_num",
        "tls_config",
        "enable_pd_heterogeneous",
        "pd_heterogeneous_label_key",
        "pd_heterogeneous_prefill_label_value",
        "pd_heterogeneous_decode_label_value",
        "engine_topology",
    },
    "motor_controller_config": {
        "mgmt_tls_config",
        "etcd_tls_config",
        "grpc_tls_config",
        "observability_tls_config",
        "fault_tolerance_config",
        "observability_config",
        "standby_config",
    },
    "motor_controller_config.instance_config": {
        "instance_assemble_timeout",
        "instance_assembler_check_interval",
        "instance_assembler_cmd_send_interval",
        "send_cmd_retry_times",
    },
    "motor_controller_config.event_config": {"event_consumer_sleep_interval"},
    "motor_controller_config.api_config": {"controller_api_dns", "observability_api_port"},
    "motor_coordinator_config": {
        "infer_tls_config",
        "mgmt_tls_config",
        "etcd_tls_config",
        "standby_config",
        "etcd_config",
        "tracer_config",
        "prometheus_metrics_config",
        "aigw",
    },
    "motor_coordinator_config.scheduler_config": {
        "endpoint_instance_score_weight",
        "kv_affinity_mode",
        "kv_affinity_load_weight",
        "kv_affinity_overlap_credit",
        "kv_affinity_prefill_load_scale",
        "kv_affinity_load_gate_topn",
    },
    "motor_coordinator_config.exception_config": {
        "recompute_enabled",
        "transport_max_retry",
        "recompute_max_retry",
    },
    "motor_coordinator_config.inference_workers_config": {"worker_metaserver_base_port"},
    "motor_coordinator_config.api_config": {
        "coordinator_api_dns",
        "coordinator_api_infer_dns",
        "coordinator_api_obs_dns",
        "coordinator_obs_port",
    },
    "motor_coordinator_config.rate_limit_config": {"provider", "scope", "skip_paths", "olc_config_path"},
    "motor_coordinator_config.api_key_config": {"encryption_algorithm", "skip_paths"},
    "motor_coordinator_config.request_limit": {"single_node_max_requests"},
    "motor_nodemanger_config": {"fault_tolerance_config"},
    "motor_nodemanger_config.api_config": {"pod_ip"},
    "motor_nodemanger_config.basic_config": {
        "job_name",
        "role",
        "model_name",
        "hardware_type",
        "device_num",
        "parallel_config",
        "enable_multi_endpoints",
        "nnodes",
    },
}
ENGINE_SECTIONS = ("motor_engine_prefill_config", "motor_engine_decode_config", "motor_engine_union_config")
for _section in ENGINE_SECTIONS:
    UNSUPPORTED_KEYS[_section] = {"health_check_config"}
for _owner in ("motor_controller_config", "motor_coordinator_config", "motor_nodemanger_config"):
    UNSUPPORTED_KEYS[f"{_owner}.logging_config"] = _LOGGING_EXTRAS

UNSUPPORTED_ENV_SECTIONS = {"motor_engine_encode_env", "motor_kv_conductor_env", "motor_mf_store_env"}

NODE_MANAGER_KEY = "motor_nodemanger_config"
NODE_MANAGER_KEY_ALT = "motor_nodemanager_config"

LEGACY_MODEL_KEYS = {
    "model_name": "served_model_name",
    "model_path": "model",
    "npu_mem_utils": "gpu_memory_utilization",
}
LEGACY_PARALLEL_KEYS = {
    "dp_size": "data_parallel_size",
    "tp_size": "tensor_parallel_size",
    "pp_size": "pipeline_parallel_size",
}


def strip_unsupported(user: dict[str, Any], warnings: list[str]) -> None:
    """Remove known-but-unimplemented pyMotor keys from `user` in place, warning once per key."""
    for section_path, keys in UNSUPPORTED_KEYS.items():
        section = _walk(user, section_path)
        if not isinstance(section, dict):
            continue
        for key in sorted(keys & section.keys()):
            del section[key]
            path = f"{section_path}.{key}" if section_path else key
            warnings.append(f"{path}: pyMotor setting not implemented by motor; ignored")


def engine_option(engine_config: dict[str, Any], name: str) -> Any:
    """Read an engine option written with underscores or dashes (`max_model_len` or `max-model-len`)."""
    if name in engine_config:
        return engine_config[name]
    return engine_config.get(name.replace("_", "-"))


def merge_legacy_model_config(section_path: str, section: dict[str, Any], warnings: list[str]) -> None:
    """Fold a deprecated `model_config` into `engine_config` (engine_config wins), warning as it goes."""
    legacy = section.pop("model_config", None)
    if legacy is None:
        return
    warnings.append(f"{section_path}.model_config: deprecated; move these settings into engine_config")
    if not isinstance(legacy, dict):
        warnings.append(f"{section_path}.model_config: not an object; ignored")
        return
    engine_config = section.setdefault("engine_config", {})
    if not isinstance(engine_config, dict):
        return
    translated: dict[str, Any] = {}
    for key, value in legacy.items():
        if key == "parallel_config" and isinstance(value, dict):
            for sub_key, sub_value in value.items():
                translated[LEGACY_PARALLEL_KEYS.get(sub_key, sub_key)] = sub_value
        else:
            translated[LEGACY_MODEL_KEYS.get(key, key)] = value
    for key, value in translated.items():
        current = engine_option(engine_config, key)
        if current is None:
            engine_config[key] = value
        elif current != value:
            warnings.append(
                f"{section_path}.model_config: {key}={value!r} conflicts with engine_config ({current!r}); "
                "engine_config wins"
            )


def _walk(document: dict[str, Any], dotted: str) -> Any:
    node: Any = document
    for part in filter(None, dotted.split(".")):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node
