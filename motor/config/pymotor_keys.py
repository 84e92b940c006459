"""Every user_config.json / env.json key MindIE Motor (formerly MindIE-PyMotor) knows, and what motor does with it.

One row per key path. `implemented`: motor's model has the key with pyMotor's meaning. `passed through`: motor
does not interpret the key but hands it on where pyMotor does. `warned`: motor does not implement it; the loader
removes it (with everything below it) and warns once, naming the path and what motor does instead.

Each row says where the key comes from: MindIE Motor's configuration as published in Ascend/MindIE-Motor (its
config classes, config_sample.json, configuration reference pages and deployer), older pyMotor releases and their
documents only, or motor itself. tests/compat/corpus/mindie-motor-latest-* set every MindIE Motor key.

The loader consults this table, so a key pyMotor knows is never reported as unknown, and docs/pymotor-compat.md
is generated from it (`python -m motor.config.compat_doc docs/pymotor-compat.md`).
"""

from dataclasses import dataclass
from enum import StrEnum

from motor.config.compat import ENGINE_SECTIONS, NODE_MANAGER_KEY


class Status(StrEnum):
    IMPLEMENTED = "implemented"
    PASSED_THROUGH = "passed through"
    WARNED = "warned"


class Origin(StrEnum):
    MINDIE_MOTOR = "MindIE Motor"
    PYMOTOR = "older pyMotor"
    MOTOR = "motor"


@dataclass(frozen=True)
class PyMotorKey:
    path: str  # dotted JSON path; env.json keys start with "env.json:"
    status: Status
    note: str = ""
    origin: Origin = Origin.MINDIE_MOTOR

    @property
    def parent(self) -> str:
        if self.path.startswith(ENV_PREFIX):
            return ENV_PREFIX
        return self.path.rpartition(".")[0]

    @property
    def key(self) -> str:
        return self.path.removeprefix(ENV_PREFIX).rpartition(".")[2]


NODE_MANAGER = NODE_MANAGER_KEY
ENV_PREFIX = "env.json:"

_ROWS: list[PyMotorKey] = []
_MINDIE = Origin.MINDIE_MOTOR
_OLDER = Origin.PYMOTOR


def _add(parent: str, status: Status, keys: str, note: str, origin: Origin) -> None:
    for key in keys.split():
        path = f"{parent}.{key}" if parent and parent != ENV_PREFIX else parent + key
        _ROWS.append(PyMotorKey(path, status, note, origin))


def _implemented(parent: str, keys: str, note: str = "", origin: Origin = _MINDIE) -> None:
    _add(parent, Status.IMPLEMENTED, keys, note, origin)


def _motor_own(parent: str, keys: str, note: str) -> None:
    """motor's own keys (pyMotor has no such key)."""
    _add(parent, Status.IMPLEMENTED, keys, note, Origin.MOTOR)


def _warned(parent: str, keys: str, note: str, origin: Origin = _MINDIE) -> None:
    _add(parent, Status.WARNED, keys, note, origin)


def _passed(parent: str, keys: str, note: str, origin: Origin = _MINDIE) -> None:
    _add(parent, Status.PASSED_THROUGH, keys, note, origin)


def _warned_section(path: str, subkeys: str, note: str, origin: Origin = _MINDIE) -> None:
    """A whole section motor ignores: the section row decides, its known sub-keys are listed for the record."""
    _warned("", path, note, origin)
    _warned(path, subkeys, f"ignored with {path.rpartition('.')[2]}", origin)


# ---- shared section shapes --------------------------------------------------------------------------------

_LOG_NOTE = (
    "motor components log to stderr (local: the run directory's log files; Kubernetes: container logs); "
    "format, files and rotation are not configurable"
)
_LOG_EXTRAS = (
    "log_max_line_length log_format log_date_format host_log_dir log_rotation_size log_rotation_count "
    "log_compress log_compress_level log_max_total_size log_cleanup_interval log_collector_enabled "
    "third_party_log_levels log_file"
)
_TLS_KEYS = "enable_tls ca_file cert_file key_file passwd_file crl_file"
_TLS_NOTE = "motor has no such channel; the TLS settings motor implements are infer, mgmt and etcd"
_TLS_FIELDS_NOTE = (
    "PEM paths (absolute); the server presents cert_file/key_file and requires client certificates signed by "
    "ca_file when it is set; clients verify peers with ca_file; passwd_file holds key_file's password; see "
    "docs/security.md"
)


def _tls(parent: str, key: str, note: str) -> None:
    """A TLS section motor implements: {enable_tls, ca_file, cert_file, key_file, passwd_file, crl_file}."""
    _implemented(parent, key, note)
    _implemented(f"{parent}.{key}", _TLS_KEYS, _TLS_FIELDS_NOTE)


_STANDBY_KEYS = (
    "enable_master_standby master_standby_check_interval master_lock_ttl master_lock_retry_interval "
    "master_lock_max_failures master_lock_key"
)
_STANDBY_NOTE = (
    "two processes (locally) or replicas (Kubernetes); the holder of the lock in etcd serves, the other binds "
    "its ports only once it holds it (docs/chaos.md#standby)"
)
_PROBE_PORT_NOTE = "where each process answers its probes, leader or standby (locally the second process uses probe_port + 1)"
_PORT_ALLOCATOR_KEYS = "enable scan_range probe_timeout_seconds remote_check_timeout_seconds bind_host"
_PORT_ALLOCATOR_NOTE = "motor assigns ports from the config deterministically; `motor validate` lists them"
_METADATA_NOTE = "motor's objects carry motor's own labels and annotations only"
_NO_CONDUCTOR_NOTE = (
    "motor deploys no KV conductor: under scheduler_type kv_cache_affinity each coordinator worker indexes the "
    "engines' KV events itself"
)


def _logging(owner: str, origin: Origin = _MINDIE) -> None:
    path = f"{owner}.logging_config"
    _implemented(owner, "logging_config", origin=origin)
    _implemented(path, "log_level", origin=origin)
    _warned(path, _LOG_EXTRAS, _LOG_NOTE, origin)


_ENDPOINTS_NOTE = "derived by pyMotor at run time; motor runs one engine server per instance on base_port"


def _node_manager(parent: str) -> None:
    _implemented(parent, NODE_MANAGER)
    path = f"{parent}.{NODE_MANAGER}" if parent else NODE_MANAGER
    _logging(path)
    _implemented(path, "api_config endpoint_config basic_config")
    _implemented(f"{path}.api_config", "node_manager_port")
    _warned(
        f"{path}.api_config", "pod_ip", "the node manager advertises its pod IP (Kubernetes) or 127.0.0.1"
    )
    _implemented(f"{path}.endpoint_config", "base_port", "engine API port; its status port is base_port + 1")
    _warned(f"{path}.endpoint_config", "endpoint_num service_ports bootstrap_port", _ENDPOINTS_NOTE)
    _warned(f"{path}.endpoint_config", "mgmt_ports", _ENDPOINTS_NOTE, _OLDER)
    _implemented(f"{path}.basic_config", "heartbeat_interval_seconds")
    _warned(
        f"{path}.basic_config",
        "job_name role model_name engine_type dispatch_capabilities ft_capability hardware_type device_num "
        "parallel_config enable_multi_endpoints nnodes",
        "filled in by pyMotor at run time; motor derives them from the deploy and engine sections",
    )
    _warned(
        f"{path}.basic_config",
        "daemon_loop_interval",
        "the node manager polls its engine's status every 0.5 s (not configurable)",
    )
    _warned_section(
        f"{path}.fault_tolerance_config",
        "enable_fault_tolerance zmq_pub_port enable_dp_scale_down_proxy container_restart_managed "
        "poll_interval_sec poll_timeout_sec max_poll_failures max_consecutive_404 unsupported_reprobe_interval_sec "
        "enable_engine_relaunch engine_restart_wait_timeout_sec engine_restart_freeze_sec",
        "the node manager restarts a dead engine with backoff and reports it to the controller",
    )
    _warned_section(
        f"{path}.snapshot_config",
        "enable_snapshot snapshot_metadata_path",
        "container snapshots are not supported",
    )
    _warned_section(
        f"{path}.vllm_startup_acceleration_config",
        "enable_startup_plan enable_graph_reuse cache_root",
        "set the vLLM options in engine_config and caches through env.json",
    )
    _warned_section(
        f"{path}.single_container_config",
        "single_container_flag node_manager_port_offset base_port_offset device_offset device_num kv_port "
        "lookup_rpc_port dp_rpc_port",
        "computed by pyMotor at run time; motor shifts ports per instance itself (deploy_mode single_container)",
    )
    _warned_section(f"{path}.port_allocator_config", _PORT_ALLOCATOR_KEYS, _PORT_ALLOCATOR_NOTE)
    _tls(path, "mgmt_tls_config", "the node manager's API and its calls to the controller")
    _warned_section(
        f"{path}.kv_cache_store_config",
        "enable backend mode service port local_service_mode local_config_path store_mode global_segment_size "
        "local_buffer_size store_http_port metadata_server protocol device_name dram_size config_store_port",
        "filled in by pyMotor at run time from the top-level kv_cache_store_config",
    )


# ---- top level --------------------------------------------------------------------------------------------

_implemented("", "version", 'must be "v2.0"')
_implemented(
    "",
    "motor_deploy_config motor_controller_config motor_coordinator_config "
    "motor_engine_prefill_config motor_engine_decode_config motor_engine_union_config",
)
_implemented(
    "", "kv_cache_pool_config", "the KV pool section (MindIE Motor calls it kv_cache_store_config)", _OLDER
)
_implemented(
    "",
    "motor_engine_encode_config",
    "the encode (EPD) role's engine, with motor_deploy_config.e_instances_num: vLLM (or motor's sim), "
    "multi_deployment, infer_service_set or local, PD disaggregation; its ec_transfer_config is filled per role "
    "(ec_producer here, ec_consumer on prefill)",
)
_implemented(
    "",
    "motor_nodemanager_config",
    "accepted as a spelling of pyMotor's motor_nodemanger_config (give only one of them)",
    _OLDER,
)
_implemented(
    "",
    "kv_cache_store_config",
    "MindIE Motor's name of kv_cache_pool_config; read as kv_cache_pool_config (give only one of them)",
)
_warned(
    "",
    "kv_conductor_config",
    f"checked, then reported: {_NO_CONDUCTOR_NOTE}",
)
_warned_section(
    "north_config",
    "name ip port",
    "motor reports to no north-bound platform; scrape /metrics instead",
    _OLDER,
)
_warned_section(
    "mf_store_config", "additional_labels additional_annotations", "motor deploys no MemFabric store"
)
_warned_section(
    "motor_container_snapshot_config",
    "enable_snapshot snapshot_metadata_path",
    "container snapshots are not supported",
)

# ---- motor_deploy_config ----------------------------------------------------------------------------------

_D = "motor_deploy_config"
_implemented(
    _D,
    "p_instances_num d_instances_num hybrid_instances_num single_p_instance_pod_num single_d_instance_pod_num "
    "single_hybrid_instance_pod_num p_pod_npu_num d_pod_npu_num hybrid_pod_npu_num job_id weight_mount_path",
)
_implemented(_D, "image_name", "required (non-empty) for Kubernetes deploy modes")
_implemented(
    _D,
    "hardware_type",
    "every pyMotor value (800I_A2, 800T_A2, 800I_A3, 800T_A3 and the A5 names) plus motor's cpu and nvidia-gpu; "
    "selects the accelerator resource requested per pod",
)
_implemented(
    _D,
    "deploy_mode",
    "local, multi_deployment, single_container, infer_service_set (rendered as multi_deployment: the "
    "InferServiceSet CRD is MindCluster's); absent = pyMotor's default infer_service_set, a Kubernetes "
    "deployment, and `motor validate` reports which targets fit",
)
_implemented(
    _D,
    "e_instances_num single_e_instance_pod_num e_pod_npu_num",
    "encode (EPD) instances: unset or 0 = none; multimodal chat requests are encoded there before prefill",
)
_implemented(
    _D,
    "tls_config",
    "defaults for the component sections' infer/mgmt/etcd_tls_config (a component's own setting wins)",
)
_tls(f"{_D}.tls_config", "infer_tls_config", "default of motor_coordinator_config.infer_tls_config")
_tls(
    f"{_D}.tls_config",
    "mgmt_tls_config",
    "default of every component's mgmt_tls_config (controller, coordinator, node managers)",
)
_tls(f"{_D}.tls_config", "etcd_tls_config", "default of motor_controller_config.etcd_tls_config")
for _tls_section in ("grpc_tls_config", "observability_tls_config"):
    _warned_section(f"{_D}.tls_config.{_tls_section}", _TLS_KEYS, _TLS_NOTE)
_warned_section(f"{_D}.tls_config.north_tls_config", _TLS_KEYS, _TLS_NOTE, _OLDER)
_warned(
    _D,
    "enable_pd_heterogeneous pd_heterogeneous_label_key pd_heterogeneous_prefill_label_value "
    "pd_heterogeneous_decode_label_value",
    "motor adds no node selectors; P and D pods schedule wherever their accelerator resource is available",
)
_warned(_D, "engine_topology", "motor places instances by the instance and pod counts only", _OLDER)
_warned_section(
    f"{_D}.storage",
    "enable type storage_class_name claim_name size mount_path access_mode server path host_path_type read_only",
    "motor mounts only weight_mount_path into engine pods; add other volumes to the rendered manifests",
)
_implemented(
    _D,
    "dshm_size",
    "size of the memory-backed /dev/shm of engine pods (Kubernetes quantity, default 4Gi as pyMotor's "
    "templates); it counts against the pod's memory",
)
_motor_own(
    _D,
    "pod_networks",
    "on Kubernetes, the pod networks (CIDR) the controller accepts node manager and engine addresses from "
    "(default: the private ranges)",
)
_warned(_D, "env_path", "motor reads env.json from --env-config / --config-dir", _OLDER)
_warned(
    _D,
    "controller_node_selector coordinator_node_selector prefill_node_selector decode_node_selector "
    "kv_pool_node_selector kv_conductor_node_selector",
    "motor adds no node selectors; add them to the rendered manifests",
)
_warned(
    _D,
    "coordinator_infer_node_port coordinator_obs_node_port controller_observability_node_port",
    "motor's Services are ClusterIP (the coordinator's inference port is Service coordinator); expose it with a "
    "NodePort or LoadBalancer Service of your own",
)

# ---- motor_controller_config ------------------------------------------------------------------------------

_C = "motor_controller_config"
_logging(_C)
_implemented(_C, "api_config instance_config event_config etcd_config")
_implemented(f"{_C}.api_config", "controller_api_host controller_api_port")
_warned(
    f"{_C}.api_config",
    "controller_api_dns",
    "motor names the controller Service itself (controller.<job_id>)",
)
_warned(
    f"{_C}.api_config",
    "observability_api_port",
    "the controller serves inventory and /metrics on its API port",
)
_implemented(
    f"{_C}.instance_config",
    "instance_heartbeat_timeout instance_expired_timeout instance_manager_check_interval",
)
_warned(
    f"{_C}.instance_config",
    "instance_assemble_timeout instance_assembler_check_interval instance_assembler_cmd_send_interval "
    "send_cmd_retry_times",
    "motor instances are one engine server each and need no assembly",
)
_warned(
    f"{_C}.instance_config",
    "instance_assembler_check_internal instance_assembler_cmd_send_internal",
    "the configuration reference's misspelling of instance_assembler_*_interval (pyMotor ignores it too); motor "
    "instances need no assembly",
)
_warned(
    f"{_C}.instance_config",
    "instance_manager_check_internal",
    "the configuration reference's misspelling of instance_manager_check_interval, which pyMotor ignores too; "
    "motor reads instance_manager_check_interval",
)
_implemented(f"{_C}.event_config", "coordinator_heartbeat_interval")
_warned(
    f"{_C}.event_config",
    "event_consumer_sleep_interval coordinator_set_sync_interval",
    "the controller pushes instance changes as they happen and resends the full set on every heartbeat",
)
_implemented(f"{_C}.etcd_config", "etcd_host etcd_port etcd_timeout enable_etcd_persistence")
_motor_own(
    f"{_C}.etcd_config",
    "etcd_auth_secret",
    "on Kubernetes, an existing Secret (keys username, password) for etcd authentication",
)
_warned(f"{_C}.etcd_config", "etcd_lb_policy", "motor talks to the one etcd endpoint given")
_warned_section(
    f"{_C}.fault_tolerance_config",
    "enable_fault_tolerance strategy_center_check_interval strategy_center_check_internal configmap_namespace "
    "configmap_prefix k8s_cert_path enable_scale_p2d enable_token_reinference "
    "scale_p2d_d_instance_reinit_wait_timeout enable_dp_scale_down enable_dp_scale_up dp_scale_down_config "
    "enable_engine_relaunch engine_relaunch_complete_timeout_sec engine_relaunch_poll_interval_sec "
    "engine_relaunch_dispatch_retries engine_relaunch_nm_unreachable_threshold",
    "motor isolates instances whose heartbeats stop and lets node managers restart engines; it reads no "
    "MindCluster device-fault ConfigMaps and never resizes a running engine's data parallel ranks",
)
_warned(
    f"{_C}.fault_tolerance_config.dp_scale_down_config",
    "request_timeout_sec poll_interval_sec execution_deadline_sec",
    "ignored with fault_tolerance_config",
)
_warned(
    f"{_C}.fault_tolerance_config",
    "enable_lingqu_network_recover",
    "ignored with fault_tolerance_config",
    _OLDER,
)
_warned_section(
    f"{_C}.observability_config",
    "observability_enable metrics_ttl",
    "every motor component serves Prometheus /metrics",
)
_implemented(_C, "standby_config", _STANDBY_NOTE)
_implemented(f"{_C}.standby_config", _STANDBY_KEYS)
_motor_own(f"{_C}.standby_config", "probe_port", _PROBE_PORT_NOTE)
_warned_section(f"{_C}.port_allocator_config", _PORT_ALLOCATOR_KEYS, _PORT_ALLOCATOR_NOTE)
_tls(_C, "mgmt_tls_config", "the controller's API and its pushes to coordinators and calls to node managers")
_tls(_C, "etcd_tls_config", "the controller's etcd client (gRPC over TLS; crl_file is refused)")
for _tls_section in ("grpc_tls_config", "observability_tls_config"):
    _warned_section(f"{_C}.{_tls_section}", _TLS_KEYS, _TLS_NOTE)
_warned(
    _C,
    "precision_auto_recovery_enabled precision_auto_recovery_enable",
    "motor has no precision detection",
)
_warned(_C, "additional_labels additional_annotations", _METADATA_NOTE)

# ---- motor_coordinator_config -----------------------------------------------------------------------------

_K = "motor_coordinator_config"
_logging(_K)
_implemented(
    _K,
    "scheduler_config exception_config timeout_config api_key_config rate_limit_config request_limit "
    "api_config inference_workers_config",
)
_S = f"{_K}.scheduler_config"
_implemented(
    _S,
    "scheduler_type",
    "load_balance, round_robin, kv_cache_affinity (routes on the engines' KV events and the pool's contents: "
    "docs/kv-routing.md); prefix_affinity (prefix hashing in the coordinator) and pd_aware are motor's own; "
    "MindIE Motor's deprecated form of prefill_/decode_scheduler_type, which win when given",
)
_implemented(
    _S,
    "prefill_scheduler_type decode_scheduler_type",
    "folded into scheduler_type: motor runs one policy, the prefill side's (encode legs always go to the least "
    "encode work); a decode side that differs from what that policy does with decode legs (e.g. round_robin "
    "under load_balance, or dynamic_bucket) is warned about, naming what motor does",
)
_warned(
    _S,
    "dynamic_bucket_short_median dynamic_bucket_long_median dynamic_bucket_border dynamic_bucket_length_scale "
    "dynamic_bucket_load_scale dynamic_bucket_short_bucket_count dynamic_bucket_long_bucket_count",
    "motor has no dynamic_bucket policy: decode legs go where scheduler_type's decode placement puts them "
    "(load_balance: the least in-flight load, tokens to compute and KV held)",
)
_warned(
    _S,
    "dp_stats_window",
    "motor logs no per-DP statistics; data parallel ranks run inside one engine, whose own /metrics reports its "
    "running requests and KV cache use",
)
_implemented(
    _S,
    "deploy_mode",
    "pyMotor's name for the dispatch style; motor derives the dispatch profile from the connector and warns "
    "when they disagree",
)
_motor_own(
    _S,
    "dispatch_profile affinity_block_size affinity_max_load_ratio admission_max_prefill_tokens "
    "admission_max_decode_requests admission_queue_timeout stall_degraded_after stall_recovery_half_life",
    "",
)
_warned(
    _S,
    "endpoint_instance_score_weight",
    "motor's load_balance ranks endpoints by in-flight load alone (tokens to compute and KV held)",
)
_FLAT_KV_AFFINITY_NOTE = (
    "deprecated flat spellings of kv_affinity.<key>; the nested key wins when both are given"
)
_implemented(
    _S,
    "kv_affinity_mode kv_affinity_load_weight kv_affinity_overlap_credit kv_affinity_prefill_load_scale "
    "kv_affinity_load_gate_topn kv_affinity_w_npu kv_affinity_w_cpu kv_affinity_w_disk",
    _FLAT_KV_AFFINITY_NOTE,
)
_motor_own(_S, "kv_affinity_hit_rate_threshold", _FLAT_KV_AFFINITY_NOTE)
_implemented(_S, "kv_affinity", "scheduler_type kv_cache_affinity's scoring")
_implemented(
    f"{_S}.kv_affinity",
    "mode load_weight overlap_credit prefill_load_scale load_gate_topn w_npu w_cpu w_disk hit_rate_threshold",
    "scheduler_type kv_cache_affinity's scoring, pyMotor's formula (w_npu: the engine's own KV cache, w_cpu: "
    "its CPU tier and the shared pool, w_disk: a disk tier)",
)
_implemented(
    _S,
    "enable_pd_separation_fallback_to_hybrid",
    "true (the default): with no routable prefill or decode instance (none up, or open circuits) a PD request "
    "runs aggregated on union, else prefill instances; false: it waits for the role, then 503",
)
_warned_section(
    f"{_S}.kv_conductor_config",
    "conductor_service http_server_port query_encoding store_backend block_size engine_type model_path "
    "pool_endpoint npu_endpoint xpu_endpoint cpu_endpoint disk_endpoint endpoint replay_endpoint "
    "re_register_interval_sec",
    _NO_CONDUCTOR_NOTE,
)
_X = f"{_K}.exception_config"
_implemented(_X, "max_retry retry_delay first_token_timeout infer_timeout")
_implemented(
    _X,
    "transport_max_retry recompute_max_retry",
    "replays of one stream (null: max_retry); recompute_max_retry is pyMotor's older spelling",
)
_implemented(
    _X,
    "recompute_enabled reschedule_enabled",
    "pyMotor's older spellings of reschedule_config.enable",
)
_implemented(_X, "reschedule_config", "replay of a stream whose engine fails after output started")
_implemented(
    f"{_X}.reschedule_config",
    "enable",
    "a stream whose engine fails after output started is replayed (prompt + tokens so far) and spliced",
)
_warned(_X, "connect_timeout", "TCP connects to engines are bounded by timeout_config.connection_timeout")
_warned(_X, "upstream_error_body_max_bytes", "engine errors reach the client as OpenAI-style error bodies")
_implemented(
    f"{_K}.timeout_config",
    "request_timeout connection_timeout read_timeout write_timeout keep_alive_timeout",
)
_implemented(
    f"{_K}.timeout_config",
    "engine_client_keepalive_expiry",
    "seconds an idle pooled connection to an engine is kept (motor's default 4, MindIE Motor's 3); keep it below "
    "the engines' own idle timeout (uvicorn's 5 s)",
)
_motor_own(
    f"{_K}.timeout_config",
    "prefill_deadline_floor prefill_deadline_cap prefill_deadline_factor prefill_deadline_allowance "
    "prefill_deadline_min_samples",
    "the per-leg prefill deadline",
)
_implemented(f"{_K}.api_key_config", "enable_api_key valid_keys header_name key_prefix")
_motor_own(
    f"{_K}.api_key_config",
    "attempts_per_client attempts_window",
    "per-client limit on checks of keys not known to be valid",
)
_warned(
    f"{_K}.api_key_config",
    "skip_paths",
    "probes, /metrics and the management API never need the key; everything under /v1 does",
)
_warned(
    f"{_K}.api_key_config",
    "encryption_algorithm",
    "valid_keys are compared as given (plain keys or salt:iterations:pbkdf2 hashes)",
)
_implemented(
    f"{_K}.rate_limit_config",
    "enable_rate_limit max_requests window_size error_message error_status_code",
)
_warned(f"{_K}.rate_limit_config", "provider olc_config_path", "motor's limiter is the built-in token bucket")
_warned(f"{_K}.rate_limit_config", "scope", "the limit is global to the coordinator")
_warned(f"{_K}.rate_limit_config", "skip_paths", "only inference requests (/v1) are rate limited")
_warned(
    f"{_K}.rate_limit_config",
    "max_request_body_size",
    "request bodies are bounded by request_limit.max_body_bytes",
)
_implemented(f"{_K}.request_limit", "max_requests", "cap on concurrent requests in the coordinator")
_motor_own(
    f"{_K}.request_limit",
    "max_body_bytes body_read_timeout head_read_timeout max_head_bytes max_connections",
    "",
)
_motor_own(_K, "input_config", "what a client's request may contain")
_motor_own(f"{_K}.input_config", "kv_transfer_params max_tokens max_n max_json_depth max_list_items", "")
_warned(
    f"{_K}.request_limit",
    "single_node_max_requests",
    "request_limit.max_requests applies whether or not decode instances are up",
)
_implemented(f"{_K}.api_config", "coordinator_api_host coordinator_api_infer_port coordinator_api_mgmt_port")
_warned(
    f"{_K}.api_config",
    "coordinator_api_dns coordinator_api_infer_dns coordinator_api_obs_dns",
    "motor names the coordinator Service itself (coordinator.<job_id>)",
)
_warned(f"{_K}.api_config", "coordinator_obs_port", "the coordinator serves /metrics on its management port")
_implemented(f"{_K}.inference_workers_config", "num_workers")
_warned(
    f"{_K}.inference_workers_config",
    "worker_metaserver_base_port",
    "the decode_first (metaserver) callback is served on the coordinator's management port",
)
_warned(
    _K,
    "context_budget_mode",
    "motor leaves max_tokens as the client sent it: an engine refuses a request whose prompt and max_tokens "
    "exceed its max_model_len (vLLM: 400, passed to the client); only a replayed stream asks for at most the "
    "context left",
)
_PLANNER_NOTE = (
    "MindIE Motor's HPA capacity planning; motor sizes prefill and decode with its own SLO planner instead: "
    "motor_planner_config (docs/planner.md)"
)
_warned_section(
    f"{_K}.prometheus_metrics_config",
    "reuse_time pool_metrics_enable pool_metrics_endpoint enable_kv_store_metrics kv_store_metrics_endpoint "
    "kv_store_backend kv_store_service kv_store_metrics_port",
    "the coordinator's /metrics is computed per scrape; the pool master serves its own /metrics; capacity "
    "planning is motor's SLO planner, motor_planner_config (docs/planner.md)",
)
_warned(f"{_K}.prometheus_metrics_config", "capacity_planning", _PLANNER_NOTE)
_warned(
    f"{_K}.prometheus_metrics_config.capacity_planning",
    "target_utilization kv_target_utilization ema_alpha capacity_decay prefill_tps_capacity_prior "
    "decode_tps_capacity_prior capacity_window_cycles pd_ratio_smooth_alpha pd_ratio_min pd_ratio_max",
    _PLANNER_NOTE,
)
_implemented(
    _K, "circuit_config", "per-instance circuit breakers, kept by the process that holds the instance set"
)
_implemented(
    f"{_K}.circuit_config",
    "enable failure_threshold base_timeout_s max_timeout_s",
    "consecutive failures open an instance's circuit for min(base·2^(trips-1), max) s; it gets legs again once "
    "its endpoints answer /health; a leg that succeeds resets it",
)
_warned_section(
    f"{_K}.render_config",
    "enable enable_streaming endpoint timeout_ms image_name launch_args",
    "motor runs no render sidecar: under scheduler_type kv_cache_affinity the coordinator tokenizes the prompt "
    "and renders the chat template itself (the model's tokenizer through transformers, or the simulator's "
    "vocabulary), and the engines get the request as the client sent it",
)
_warned(
    f"{_K}.render_config",
    "enabled",
    "the configuration reference's spelling of enable; ignored with render_config",
)
_warned(f"{_K}.render_config.endpoint", "host port", "ignored with render_config")
_warned_section(
    f"{_K}.token_obfuscation_config",
    "enable model_path vocab_size token_white_list seed_content image_config",
    "motor permutes no prompt token ids or image tensors (it has no render path): engines get requests as the "
    "client sent them, so serve weights that are not data-obfuscated",
)
_warned(
    f"{_K}.token_obfuscation_config.image_config",
    "enable model_path patch_size merge_size longest_edge shortest_edge temporal_patch_size",
    "ignored with token_obfuscation_config",
)
_warned_section(
    f"{_K}.mgmt_api_key_config",
    "enable_api_key api_key_file",
    "the management API (/instances/refresh) requires the controller token instead",
)
_implemented(_K, "standby_config", _STANDBY_NOTE)
_implemented(f"{_K}.standby_config", _STANDBY_KEYS)
_motor_own(f"{_K}.standby_config", "probe_port", _PROBE_PORT_NOTE)
_implemented(_K, "etcd_config", "the etcd holding the standby lock")
_implemented(f"{_K}.etcd_config", "etcd_host etcd_port etcd_timeout")
_warned(
    f"{_K}.etcd_config",
    "enable_etcd_persistence etcd_lb_policy",
    "the coordinator keeps no state in etcd (it gets the instance set from the controller) and talks to the one "
    "etcd endpoint given",
)
_tls(_K, "infer_tls_config", "the client-facing OpenAI API (inference port)")
_tls(_K, "mgmt_tls_config", "the management port (instance pushes, probes, /metrics)")
_warned_section(
    f"{_K}.etcd_tls_config",
    _TLS_KEYS,
    "the coordinator's standby lock connects to etcd without TLS; give the lock an etcd it reaches in plain gRPC",
)
_implemented(_K, "tracer_config", "OpenTelemetry traces of every request and its legs, exported over OTLP")
_implemented(
    f"{_K}.tracer_config",
    "endpoint root_sampling_rate remote_parent_sampled remote_parent_not_sampled local_parent_sampled "
    "local_parent_not_sampled",
    'endpoint "" = off; ParentBased over TraceIdRatioBased with these rates; vLLM engines export to the same '
    "endpoint",
)
_warned_section(
    f"{_K}.aigw",
    "id object owned_by p_max_seqlen d_max_seqlen slo_ttft slo_tpot",
    "GET /v1/models lists the engines' served_model_name",
)
_warned(_K, "aigw_model", "GET /v1/models lists the engines' served_model_name")
_warned_section(
    f"{_K}.deploy_config",
    "p_instances_num d_instances_num hybrid_instances_num single_hybrid_instance_pod_num hybrid_pod_npu_num",
    "derived by pyMotor at run time; motor reads motor_deploy_config",
)
_warned_section(
    f"{_K}.prefill_kv_event_config",
    "conductor_service http_server_port query_encoding block_size endpoint replay_endpoint engine_type model_path "
    "re_register_interval_sec",
    _NO_CONDUCTOR_NOTE,
)
_warned_section(
    f"{_K}.kv_event_registration",
    "conductor_service http_server_port store_backend block_size engine_type model_path pool_endpoint "
    "npu_endpoint cpu_endpoint disk_endpoint endpoint replay_endpoint re_register_interval_sec",
    _NO_CONDUCTOR_NOTE,
)
for _precision_section in ("precision_detection_config", "token_sampling_config"):
    _warned_section(
        f"{_K}.{_precision_section}",
        "interval_seconds logprobs_count precision_check_enabled precision_issue_threshold "
        "precision_clear_threshold probe_max_attempts probe_timeout_seconds",
        "motor has no precision detection",
    )
_warned_section(f"{_K}.port_allocator_config", _PORT_ALLOCATOR_KEYS, _PORT_ALLOCATOR_NOTE)
_warned(
    _K,
    "_errors worker_index worker_metaserver_port",
    "internal fields that pyMotor's generated config sample contains",
)
_warned(_K, "additional_labels additional_annotations", _METADATA_NOTE)

# ---- motor_nodemanger_config (top level and inside engine sections) ---------------------------------------

_node_manager("")

# ---- engine sections --------------------------------------------------------------------------------------

for _engine in ENGINE_SECTIONS:
    _implemented(
        _engine, "engine_type", "vllm, sglang (and motor's sim); pyMotor's mindie-llm has no adapter"
    )
    _passed(
        _engine,
        "engine_config",
        "the engine's own options, handed to the engine; motor reads the model, parallelism and "
        "kv_transfer_config from it and fills kv_role and engine_id per instance",
    )
    _implemented(
        _engine,
        "model_config",
        "pyMotor's form: model_name, model_path, npu_mem_utils and the role's parallel sizes "
        "(prefill_/decode_parallel_config, else parallel_config: dp/tp/pp/pcp_size, dp_rpc_port, enable_ep; "
        "world_size checked) are folded into engine_config under the engine type's own names (vLLM's or "
        "SGLang's; engine_config wins)",
    )
    _implemented(
        _engine,
        "dispatch_profile",
        "pyMotor's handoff is motor's prefill_first, trigger is decode_first; motor's own profile names work too",
    )
    _warned(
        _engine,
        "dispatch_capabilities",
        "derived from the connector; pyMotor ignores a configured value as well",
    )
    _warned(
        _engine,
        "enable_multi_endpoints",
        "motor runs one engine server per instance (data parallel ranks inside the engine)",
    )
    _warned_section(
        f"{_engine}.health_check_config",
        "enable_virtual_inference npu_usage_threshold max_failure_count virtual_inference_timeout "
        "health_collector_timeout health_collector_timeout_retry_attempts startup_timeout",
        "the node manager polls the engine's /health and restarts it when it stops answering",
    )
    _warned(_engine, "additional_labels additional_annotations", _METADATA_NOTE)
    _node_manager(_engine)

# ---- KV pool ----------------------------------------------------------------------------------------------

_P = "kv_cache_pool_config"
_implemented(
    _P,
    "metadata_server protocol device_name global_segment_size local_buffer_size",
    "written into the engines' Mooncake store config",
    _OLDER,
)
_implemented(
    _P,
    "eviction_high_watermark_ratio eviction_ratio default_kv_lease_ttl port",
    "mooncake_master arguments (defaults 0.9, 0.1, 11000 ms, 50088); the lease must exceed the engines' "
    "transfer timeouts",
    _OLDER,
)
_motor_own(_P, "metrics_port", "mooncake_master's metrics port (default 9003)")
_ALLOCATION_NOTE = (
    "mooncake_master's --allocation_strategy (random, free_ratio_first, local_first, cxl, ssd_free_ratio_first; "
    "unset: the master's default)"
)
_motor_own(_P, "allocation_strategy", _ALLOCATION_NOTE)
_passed(
    _P,
    "prefer_alloc_in_same_node preferred_segment replica_num",
    "like every other key here, copied into the engines' Mooncake store config, as pyMotor does",
    _OLDER,
)

_T = "kv_cache_store_config"
_implemented(
    _T,
    "metadata_server protocol device_name global_segment_size local_buffer_size eviction_high_watermark_ratio "
    "eviction_ratio default_kv_lease_ttl port metrics_port",
    "same meaning as in kv_cache_pool_config",
)
_motor_own(_T, "allocation_strategy", _ALLOCATION_NOTE)
_implemented(
    _T,
    "backend",
    "motor's pool is Mooncake: mooncake is implemented, memcache is warned about and a Mooncake master is "
    "deployed instead",
)
_warned(
    _T,
    "enable mode store_mode store_http_port target_job_id local_service_mode config_store_port service dram_size "
    "local_config_path",
    "motor deploys one mooncake_master per job (embedded stores in the engines)",
)
_warned(_T, "additional_labels additional_annotations", _METADATA_NOTE)

_warned(
    "kv_conductor_config",
    "kvevent_instance http_server_port",
    "checked, then ignored with kv_conductor_config",
)
_warned(
    "kv_conductor_config",
    "conductor_service query_encoding store_backend block_size engine_type model_path pool_endpoint npu_endpoint "
    "xpu_endpoint cpu_endpoint disk_endpoint endpoint replay_endpoint re_register_interval_sec",
    _NO_CONDUCTOR_NOTE,
)
_warned("kv_conductor_config", "additional_labels additional_annotations", _METADATA_NOTE)

# ---- motor_planner_config (motor's own section) -----------------------------------------------------------

_PL = "motor_planner_config"
_motor_own(
    "",
    _PL,
    "the SLO planner that sizes prefill and decode to the traffic (docs/planner.md); "
    "pyMotor's fault_tolerance_config.enable_scale_p2d stays warned",
)
_logging(_PL, Origin.MOTOR)
_motor_own(_PL, "enable", "deploy the planner (default false)")
_motor_own(_PL, "api_config", "")
_motor_own(f"{_PL}.api_config", "planner_api_port", "metrics, status and probes (1028)")
_motor_own(
    _PL,
    "min_prefill max_prefill min_decode max_decode max_instances max_accelerators",
    "bounds per role and the budget (instances, or instances × pods × accelerators per pod)",
)
_motor_own(
    _PL,
    "ttft_slo_ms itl_slo_ms max_utilization",
    "the objectives the planner sizes for (2000 ms, 100 ms) and the busiest share of its "
    "measured capacity an instance is planned for (0.85)",
)
_motor_own(
    _PL,
    "interval_s window_s cooldown_s scale_down_intervals hysteresis_margin max_changes_per_minute "
    "enable_role_conversion",
    "how often and how cautiously the planner changes the counts",
)
_motor_own(_PL, "fill_budget", "keep the whole budget, split between the roles by need (default false)")

# ---- env.json ---------------------------------------------------------------------------------------------

_implemented(
    ENV_PREFIX,
    "version motor_common_env motor_controller_env motor_coordinator_env motor_engine_prefill_env "
    "motor_engine_decode_env motor_engine_union_env motor_engine_encode_env motor_kv_cache_pool_env",
)
_warned(ENV_PREFIX, "motor_kv_conductor_env", "motor deploys no KV conductor")
_warned(ENV_PREFIX, "motor_mf_store_env", "motor deploys no MemFabric store")
_warned(
    ENV_PREFIX, "motor_kv_cache_store_env", "use motor_kv_cache_pool_env for the pool master's environment"
)

PYMOTOR_KEYS: tuple[PyMotorKey, ...] = tuple(_ROWS)
BY_PATH: dict[str, PyMotorKey] = {row.path: row for row in PYMOTOR_KEYS}


def keys_under(parent: str) -> dict[str, PyMotorKey]:
    """The table's keys directly under `parent` (a dotted path; "" is the document, "env.json:" env.json)."""
    return {row.key: row for row in PYMOTOR_KEYS if row.parent == parent}


def warned_keys(parent: str) -> dict[str, PyMotorKey]:
    return {key: row for key, row in keys_under(parent).items() if row.status == Status.WARNED}


def markdown_table() -> str:
    lines = ["| key | from | status | what motor does |", "|---|---|---|---|"]
    for row in PYMOTOR_KEYS:
        note = row.note.replace("|", "/")
        lines.append(f"| `{row.path}` | {row.origin.value} | {row.status.value} | {note} |")
    return "\n".join(lines) + "\n"
