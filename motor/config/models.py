"""Typed models of user_config.json ("v2.0") and env.json ("2.0.0").

Every field here is used by motor; keys pyMotor knows but motor does not implement are reported by the loader
as warnings (see pymotor_keys.py), and any other unknown key is an error. `engine_config` is the engine's own
option set and passes through untouched. Numbers and booleans are strict: `true` is not an integer, `1.5` is
not an instance count and "yes" is not a boolean.
"""

import ipaddress
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    model_validator,
)

from motor.config.hardware import DEFAULT_HARDWARE, HARDWARE, known_hardware
from motor.config.suggest import did_you_mean
from motor.kv.connectors import DispatchProfile
from motor.kv.pool import KvCachePoolConfig

Int = Annotated[int, Strict()]
Number = Annotated[float, Strict()]
Bool = Annotated[bool, Strict()]
Port = Annotated[int, Strict(), Field(ge=1, le=65535)]
PositiveSeconds = Annotated[float, Strict(), Field(gt=0)]
InstanceCount = Annotated[int, Strict(), Field(ge=1, le=16)]
EncodeCount = Annotated[int, Strict(), Field(ge=0, le=16)]  # pyMotor: unset or 0 = no encode (EPD) role
PodCount = Annotated[int, Strict(), Field(ge=1, le=64)]
AcceleratorCount = Annotated[int, Strict(), Field(ge=0, le=16)]

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _dns_label(value: str) -> str:
    if len(value) > 63 or not _DNS_LABEL.match(value):
        raise ValueError(
            f"{value!r} is not a DNS-1123 label: lowercase letters, digits and '-', starting and ending with a "
            "letter or digit, at most 63 characters (it names the Kubernetes namespace), e.g. 'mindie-motor'"
        )
    return value


DnsLabel = Annotated[str, AfterValidator(_dns_label)]


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]


class LoggingConfig(Section):
    log_level: LogLevel = "INFO"


class TlsConfig(Section):
    """pyMotor's TLS setting of one channel. Paths to PEM files; `passwd_file` holds the password of an
    encrypted `key_file`. A server presents cert_file/key_file and, when ca_file is set, requires client
    certificates signed by it (mutual TLS); a client verifies the server against ca_file (else the system's
    trust store) and presents cert_file/key_file when given. crl_file lists revoked certificates."""

    enable_tls: Bool = False
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    passwd_file: str = ""
    crl_file: str = ""

    @property
    def paths(self) -> dict[str, str]:
        """The file fields that are set, by name."""
        return {name: value for name, value in self.model_dump().items() if name.endswith("_file") and value}


class DeployTlsConfig(Section):
    """`motor_deploy_config.tls_config`: defaults for the component sections' own TLS settings."""

    infer_tls_config: TlsConfig | None = None
    mgmt_tls_config: TlsConfig | None = None
    etcd_tls_config: TlsConfig | None = None


# ---- motor_deploy_config ---------------------------------------------------------------------------------

DeployMode = Literal["local", "multi_deployment", "single_container", "infer_service_set"]
KUBERNETES_MODES = ("multi_deployment", "single_container", "infer_service_set")


def _known_hardware(value: str) -> str:
    if value not in HARDWARE:
        raise ValueError(
            f"{value!r} is not a hardware type pyMotor or motor knows{did_you_mean(value, known_hardware())}; "
            f"known: {', '.join(known_hardware())}"
        )
    return value


# What pyMotor's engine pod templates give /dev/shm (a memory-backed emptyDir).
DEFAULT_DSHM_SIZE = "4Gi"
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)$")


def _memory_quantity(value: str) -> str:
    if not _QUANTITY.match(value):
        raise ValueError(
            f"{value!r} is not a Kubernetes memory quantity with a unit (a bare number would mean bytes); "
            "write it like '4Gi' or '512Mi'"
        )
    return value


def _pod_network(value: str) -> str:
    try:
        return str(ipaddress.ip_network(value))
    except ValueError as exc:
        raise ValueError(
            f"{value!r} is not a network in CIDR notation ({exc}); give your cluster's pod network, e.g. "
            "'10.244.0.0/16'"
        ) from None


class DeployConfig(Section):
    p_instances_num: InstanceCount | None = None
    d_instances_num: InstanceCount | None = None
    hybrid_instances_num: InstanceCount | None = None
    e_instances_num: EncodeCount | None = None
    single_p_instance_pod_num: PodCount = 1
    single_d_instance_pod_num: PodCount = 1
    single_hybrid_instance_pod_num: PodCount = 1
    single_e_instance_pod_num: PodCount = 1
    p_pod_npu_num: AcceleratorCount = 1
    d_pod_npu_num: AcceleratorCount = 1
    hybrid_pod_npu_num: AcceleratorCount = 1
    e_pod_npu_num: AcceleratorCount = 1
    image_name: str | None = None
    job_id: DnsLabel = "motor"
    hardware_type: Annotated[str, AfterValidator(_known_hardware)] = DEFAULT_HARDWARE
    weight_mount_path: str = "/mnt/weight"
    deploy_mode: DeployMode | None = Field(
        default=None, description="absent: pyMotor's default, infer_service_set (a Kubernetes deployment)"
    )
    tls_config: DeployTlsConfig = DeployTlsConfig()
    dshm_size: Annotated[str, AfterValidator(_memory_quantity)] = DEFAULT_DSHM_SIZE
    pod_networks: list[Annotated[str, AfterValidator(_pod_network)]] | None = Field(
        default=None,
        min_length=1,
        description="motor's own key: on Kubernetes, the networks (CIDR) pod addresses come from; the controller "
        "refuses registrations naming addresses outside them (default: the private ranges; local: loopback)",
    )

    @property
    def kubernetes_layout(self) -> Literal["multi_deployment", "single_container"]:
        """The objects motor renders: infer_service_set (and no mode) get multi_deployment's."""
        return "single_container" if self.deploy_mode == "single_container" else "multi_deployment"


# ---- motor_controller_config -----------------------------------------------------------------------------


class ControllerApiConfig(Section):
    controller_api_host: str = "127.0.0.1"
    controller_api_port: Port = 1027


class InstanceConfig(Section):
    instance_heartbeat_timeout: PositiveSeconds = 10.0
    instance_expired_timeout: PositiveSeconds = 300.0
    instance_manager_check_interval: PositiveSeconds = 1.0


class EventConfig(Section):
    coordinator_heartbeat_interval: PositiveSeconds = 10.0


class EtcdEndpointConfig(Section):
    etcd_host: str = "127.0.0.1"
    etcd_port: Port = 2379
    etcd_timeout: PositiveSeconds = 5.0


class EtcdConfig(EtcdEndpointConfig):
    enable_etcd_persistence: Bool = False
    etcd_auth_secret: str | None = Field(
        default=None,
        description="motor's own key: on Kubernetes, an existing Secret with keys `username` and `password` "
        "for etcd authentication (else env.json's MOTOR_ETCD_USERNAME / MOTOR_ETCD_PASSWORD, if set)",
    )


class StandbyConfig(Section):
    """pyMotor's master/standby: two processes, the one holding a lease in etcd (the `master_lock_key` lock)
    serves, the other waits for it to expire. The leader refreshes its lease every
    `master_standby_check_interval` seconds; `master_lock_ttl` bounds how long a dead leader keeps it."""

    enable_master_standby: Bool = False
    master_standby_check_interval: PositiveSeconds = 5.0
    master_lock_ttl: Annotated[int, Strict(), Field(ge=2, le=3600)] = 10
    master_lock_retry_interval: PositiveSeconds = 5.0
    master_lock_max_failures: Annotated[int, Strict(), Field(ge=1)] = 3
    master_lock_key: str = Field(default="/master_lock", pattern=r"^/[A-Za-z0-9_./-]*$")
    probe_port: Port | None = Field(
        default=None,
        description="motor's own key: where each of the two processes answers its probes (locally the second "
        "one uses probe_port + 1; default: the component's first port + 1000)",
    )

    @model_validator(mode="after")
    def _refresh_within_ttl(self) -> "StandbyConfig":
        if self.master_standby_check_interval >= self.master_lock_ttl:
            raise ValueError(
                f"master_standby_check_interval ({self.master_standby_check_interval:g} s) must be shorter than "
                f"master_lock_ttl ({self.master_lock_ttl} s): the leader refreshes its lease at that interval, "
                "so it would expire between two refreshes; lower the interval or raise the TTL"
            )
        return self


class ControllerConfig(Section):
    logging_config: LoggingConfig = LoggingConfig()
    api_config: ControllerApiConfig = ControllerApiConfig()
    instance_config: InstanceConfig = InstanceConfig()
    event_config: EventConfig = EventConfig()
    etcd_config: EtcdConfig = EtcdConfig()
    mgmt_tls_config: TlsConfig | None = None
    etcd_tls_config: TlsConfig | None = None
    standby_config: StandbyConfig = StandbyConfig()


# ---- motor_coordinator_config ----------------------------------------------------------------------------

LegacyDeployMode = Literal[
    "single_node",
    "pd_separate",
    "cdp_separate",
    "cpcd_separate",
    "pd_dual_dispatch",
    "pd_disaggregation_single_container",
]
LEGACY_DEPLOY_MODE_PROFILE: dict[str, DispatchProfile] = {
    "single_node": DispatchProfile.AGGREGATED,
    "pd_separate": DispatchProfile.DECODE_FIRST,
    "cdp_separate": DispatchProfile.DECODE_FIRST,
    "pd_disaggregation_single_container": DispatchProfile.DECODE_FIRST,
    "cpcd_separate": DispatchProfile.PREFILL_FIRST,
    "pd_dual_dispatch": DispatchProfile.CONCURRENT,
}


class KvAffinityConfig(Section):
    """`scheduler_config.kv_affinity`: how scheduler_type kv_cache_affinity weighs what each prefill/union endpoint
    holds of a prompt (pyMotor's keys and defaults; see motor/coordinator/scheduling/kv_affinity.py)."""

    mode: Literal["unified", "load_gated"] = "unified"
    load_weight: Annotated[float, Strict(), Field(ge=0)] = 1.0
    overlap_credit: Annotated[float, Strict(), Field(ge=0, le=1)] = 1.0
    prefill_load_scale: Annotated[float, Strict(), Field(ge=0)] = 1.0
    load_gate_topn: Annotated[int, Strict(), Field(ge=0, description="0: 2")] = 0
    w_npu: Annotated[float, Strict(), Field(ge=0, le=1)] = 1.0
    w_cpu: Annotated[float, Strict(), Field(ge=0, le=1)] = 1.0
    w_disk: Annotated[float, Strict(), Field(ge=0, le=1)] = 0.0
    hit_rate_threshold: Annotated[float, Strict(), Field(ge=0, le=1)] = 0.0


# pyMotor's deprecated flat spellings of the kv_affinity keys (`scheduler_config.kv_affinity_<key>`)
KV_AFFINITY_FLAT_PREFIX = "kv_affinity_"


class SchedulerConfig(Section):
    dispatch_profile: DispatchProfile | None = None
    deploy_mode: LegacyDeployMode | None = Field(
        default=None,
        description="pyMotor's name for the dispatch style; checked against the resolved profile",
    )
    scheduler_type: Literal[
        "round_robin", "load_balance", "prefix_affinity", "pd_aware", "kv_cache_affinity"
    ] = "load_balance"
    affinity_block_size: Annotated[int, Strict(), Field(ge=1)] = 128
    affinity_max_load_ratio: Annotated[float, Strict(), Field(ge=1.0)] = 2.0
    admission_max_prefill_tokens: Annotated[int, Strict(), Field(ge=1)] = 16384
    admission_max_decode_requests: Annotated[int, Strict(), Field(ge=1)] = 256
    enable_pd_separation_fallback_to_hybrid: Bool = Field(
        default=True,
        description="a PD profile with no routable prefill or decode instance serves aggregated on what is left",
    )
    admission_queue_timeout: Annotated[float, Strict(), Field(ge=0)] = 5.0
    stall_degraded_after: Annotated[int, Strict(), Field(ge=1)] = 2
    stall_recovery_half_life: PositiveSeconds = 60.0

    kv_affinity: KvAffinityConfig = Field(default_factory=KvAffinityConfig)

    @model_validator(mode="before")
    @classmethod
    def _flat_kv_affinity_keys(cls, data: object) -> object:
        """Fold the flat `kv_affinity_<key>` aliases into `kv_affinity`; a key set in both, the nested one wins."""
        if not isinstance(data, dict) or not any(
            isinstance(k, str) and k.startswith(KV_AFFINITY_FLAT_PREFIX) for k in data
        ):
            return data
        data = dict(data)
        nested = data.get("kv_affinity")
        folded = dict(nested) if isinstance(nested, dict) else {}
        for key in [k for k in data if isinstance(k, str) and k.startswith(KV_AFFINITY_FLAT_PREFIX)]:
            folded.setdefault(key.removeprefix(KV_AFFINITY_FLAT_PREFIX), data.pop(key))
        if nested is None or isinstance(nested, dict):
            data["kv_affinity"] = folded
        return data


class RescheduleConfig(Section):
    """Replay of a stream whose engine failed after its output started (docs/chaos.md, "Replay")."""

    enable: Bool = False


# pyMotor's older spellings in exception_config: key → (its current key, the sub-section holding it or None)
_EXCEPTION_ALIASES = {
    "recompute_enabled": ("enable", "reschedule_config"),
    "reschedule_enabled": ("enable", "reschedule_config"),
    "recompute_max_retry": ("transport_max_retry", None),
}


class ExceptionConfig(Section):
    max_retry: Annotated[int, Strict(), Field(ge=0, le=100)] = 5
    retry_delay: Annotated[float, Strict(), Field(ge=0)] = 0.2
    first_token_timeout: PositiveSeconds = 600.0
    infer_timeout: PositiveSeconds = 3600.0
    transport_max_retry: Annotated[
        int | None, Strict(), Field(ge=0, le=100, description="null: max_retry")
    ] = None
    reschedule_config: RescheduleConfig = Field(default_factory=RescheduleConfig)

    @model_validator(mode="before")
    @classmethod
    def _older_spellings(cls, data: object) -> object:
        """Fold pyMotor's older keys into the current ones; a key set both ways, the current one wins."""
        if not isinstance(data, dict) or not any(key in data for key in _EXCEPTION_ALIASES):
            return data
        data = dict(data)
        for old, (key, section) in _EXCEPTION_ALIASES.items():
            if old not in data:
                continue
            value = data.pop(old)
            if section is None:
                data.setdefault(key, value)
                continue
            nested = data.get(section)
            if nested is None or isinstance(nested, dict):
                data[section] = {key: value, **(nested or {})}
        return data

    @property
    def replay_retries(self) -> int:
        """How many times one request's stream may be replayed."""
        return self.max_retry if self.transport_max_retry is None else self.transport_max_retry


class TimeoutConfig(Section):
    """pyMotor's timeouts (its five and the idle expiry of engine connections), and motor's own per-leg prefill
    deadline: `clamp(prefill_deadline_floor, prefill_deadline_allowance + prefill_deadline_factor × tokens /
    observed rate, prefill_deadline_cap)`, where tokens is the instance's prefill work in flight (this prompt
    included) and the rate the instance's measured prefill throughput. Until `prefill_deadline_min_samples` legs
    were measured there, a prefill leg gets the cap; the cap defaults to (and never exceeds) request_timeout."""

    request_timeout: PositiveSeconds = 30.0
    connection_timeout: PositiveSeconds = 10.0
    read_timeout: PositiveSeconds = 15.0
    write_timeout: PositiveSeconds = 15.0
    keep_alive_timeout: PositiveSeconds = 60.0
    engine_client_keepalive_expiry: PositiveSeconds = Field(
        default=4.0,
        description="seconds an idle pooled connection to an engine is kept; keep it below the engines' own idle "
        "timeout (uvicorn's 5 s) so no request is written into a connection the engine is closing",
    )
    prefill_deadline_floor: PositiveSeconds = 2.0
    prefill_deadline_cap: PositiveSeconds | None = None
    prefill_deadline_factor: Annotated[float, Strict(), Field(ge=1.0)] = 4.0
    prefill_deadline_allowance: Annotated[float, Strict(), Field(ge=0)] = 1.0
    prefill_deadline_min_samples: Annotated[int, Strict(), Field(ge=1)] = 5

    @model_validator(mode="after")
    def _floor_within_cap(self) -> "TimeoutConfig":
        cap = self.prefill_deadline_cap
        if cap is not None and self.prefill_deadline_floor > cap:
            raise ValueError(
                f"prefill_deadline_floor ({self.prefill_deadline_floor:g} s) is above prefill_deadline_cap "
                f"({cap:g} s): lower the floor or raise the cap"
            )
        return self


class ApiKeyConfig(Section):
    enable_api_key: Bool = False
    valid_keys: list[str] = []
    header_name: str = "Authorization"
    key_prefix: str = "Bearer "
    attempts_per_client: Annotated[int, Strict(), Field(ge=1)] = Field(
        default=20,
        description="motor's own key: checks of keys not known to be valid (wrong keys, a hashed key's first "
        "use) one client address may make per attempts_window seconds; beyond that → 429 before any check",
    )
    attempts_window: PositiveSeconds = Field(
        default=60.0, description="motor's own key: the window of attempts_per_client, in seconds"
    )


class RateLimitConfig(Section):
    enable_rate_limit: Bool = False
    max_requests: Annotated[int, Strict(), Field(ge=1)] = 1000
    window_size: PositiveSeconds = 60.0
    error_message: str = "too many requests, please try again later"
    error_status_code: Annotated[int, Strict(), Field(ge=100, le=599)] = 429


class RequestLimitConfig(Section):
    max_requests: Annotated[int, Strict(), Field(ge=1)] | None = None
    max_body_bytes: Annotated[int, Strict(), Field(ge=1024)] = 10 << 20
    body_read_timeout: PositiveSeconds = Field(
        default=30.0,
        description="motor's own key: seconds a client has to send its whole request body once admitted (→ 408)",
    )
    head_read_timeout: PositiveSeconds = Field(
        default=10.0,
        description="motor's own key: seconds a client has to send a request head (request line and headers) "
        "once its first byte arrived (→ 408 and the connection is closed)",
    )
    max_head_bytes: Annotated[int, Strict(), Field(ge=1024, le=1 << 20)] = Field(
        default=64 << 10,
        description="motor's own key: bytes a request head (request line and headers) may hold "
        "(→ 431 and the connection is closed)",
    )
    max_connections: Annotated[int, Strict(), Field(ge=1)] = Field(
        default=8192,
        description="motor's own key: open client connections per inference worker; requests on connections "
        "beyond it → 503 and the connection is closed",
    )


class InputConfig(Section):
    """motor's own section: what a client's request may contain (docs/security.md)."""

    kv_transfer_params: Literal["reject", "strip"] = Field(
        default="reject",
        description="motor's own key: a client body carrying KV transfer fields (kv_transfer_params, "
        "bootstrap_host/port/room) → 400 (reject), or the fields are removed before any engine sees them (strip)",
    )
    max_tokens: Annotated[int, Strict(), Field(ge=1)] = Field(
        default=1 << 20,
        description="motor's own key: the largest max_tokens / max_completion_tokens accepted",
    )
    max_n: Annotated[int, Strict(), Field(ge=1)] = Field(
        default=128, description="motor's own key: the largest n / best_of accepted"
    )
    max_json_depth: Annotated[int, Strict(), Field(ge=4, le=512)] = Field(
        default=64, description="motor's own key: the deepest nesting of objects and arrays in a request body"
    )
    max_list_items: Annotated[int, Strict(), Field(ge=1)] = Field(
        default=4096,
        description="motor's own key: the most messages, content parts per message, or prompts in a batch",
    )


class CoordinatorApiConfig(Section):
    coordinator_api_host: str = "127.0.0.1"
    coordinator_api_infer_port: Port = 1025
    coordinator_api_mgmt_port: Port = 1026


class InferenceWorkersConfig(Section):
    num_workers: Annotated[int, Strict(), Field(ge=1, le=64)] = 1


class CircuitConfig(Section):
    """Per-instance circuit breakers (docs/chaos.md, "Circuit breakers"): `failure_threshold` consecutive leg
    failures that are the instance's fault open its circuit for `min(base_timeout_s * 2**(trips - 1),
    max_timeout_s)`; then the instance gets legs again once its endpoints answer GET /health."""

    enable: Bool = True
    failure_threshold: Annotated[int, Strict(), Field(ge=1, le=1000)] = 3
    base_timeout_s: PositiveSeconds = 30.0
    max_timeout_s: PositiveSeconds = 300.0

    @model_validator(mode="after")
    def _max_not_below_base(self) -> "CircuitConfig":
        if self.max_timeout_s < self.base_timeout_s:
            raise ValueError(
                f"max_timeout_s ({self.max_timeout_s:g}) is below base_timeout_s ({self.base_timeout_s:g}): "
                "raise max_timeout_s or lower base_timeout_s"
            )
        return self


SamplingRate = Annotated[float, Strict(), Field(gt=0, le=1)]


class TracerConfig(Section):
    """OpenTelemetry traces (docs/observability.md, "Traces"): `endpoint` is the OTLP collector ("" = off; the
    protocol comes from OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, grpc by default, or http/protobuf). Each rate is a
    trace-id ratio: `root_sampling_rate` for requests without a parent, the other four by the client's
    `traceparent` (remote) or a span of the process (local), sampled or not."""

    endpoint: str = ""
    root_sampling_rate: SamplingRate = 1.0
    remote_parent_sampled: SamplingRate = 1.0
    remote_parent_not_sampled: SamplingRate = 1.0
    local_parent_sampled: SamplingRate = 1.0
    local_parent_not_sampled: SamplingRate = 1.0


class CoordinatorConfig(Section):
    logging_config: LoggingConfig = LoggingConfig()
    scheduler_config: SchedulerConfig = SchedulerConfig()
    exception_config: ExceptionConfig = ExceptionConfig()
    circuit_config: CircuitConfig = CircuitConfig()
    tracer_config: TracerConfig = TracerConfig()
    timeout_config: TimeoutConfig = TimeoutConfig()
    api_key_config: ApiKeyConfig = ApiKeyConfig()
    rate_limit_config: RateLimitConfig = RateLimitConfig()
    request_limit: RequestLimitConfig = RequestLimitConfig()
    input_config: InputConfig = InputConfig()
    api_config: CoordinatorApiConfig = CoordinatorApiConfig()
    inference_workers_config: InferenceWorkersConfig = InferenceWorkersConfig()
    infer_tls_config: TlsConfig | None = None
    mgmt_tls_config: TlsConfig | None = None
    etcd_config: EtcdEndpointConfig = Field(
        default=EtcdEndpointConfig(),
        description="where the standby lock lives (the coordinator persists nothing)",
    )
    standby_config: StandbyConfig = StandbyConfig()


# ---- motor_nodemanger_config -----------------------------------------------------------------------------


class NodeManagerApiConfig(Section):
    node_manager_port: Port = 1030


class EndpointConfig(Section):
    base_port: Port = 10000


class NodeManagerBasicConfig(Section):
    heartbeat_interval_seconds: PositiveSeconds = 3.0


class NodeManagerConfig(Section):
    logging_config: LoggingConfig = LoggingConfig()
    api_config: NodeManagerApiConfig = NodeManagerApiConfig()
    endpoint_config: EndpointConfig = EndpointConfig()
    basic_config: NodeManagerBasicConfig = NodeManagerBasicConfig()
    mgmt_tls_config: TlsConfig | None = None


# ---- motor_planner_config (motor's own section) -----------------------------------------------------------


class PlannerApiConfig(Section):
    planner_api_port: Port = 1028


Fraction = Annotated[float, Strict(), Field(ge=0, lt=1)]
Share = Annotated[float, Strict(), Field(gt=0, le=1)]
PositiveMs = Annotated[float, Strict(), Field(gt=0)]


class PlannerConfig(Section):
    """The SLO planner (docs/planner.md): sizes the prefill and decode sides to the traffic, within bounds per
    role and a total budget, through the scale paths `--update-instance-num` uses."""

    enable: Bool = False
    logging_config: LoggingConfig = LoggingConfig()
    api_config: PlannerApiConfig = PlannerApiConfig()
    min_prefill: InstanceCount = 1
    max_prefill: InstanceCount | None = Field(default=None, description="None: only the budget bounds it")
    min_decode: InstanceCount = 1
    max_decode: InstanceCount | None = Field(default=None, description="None: only the budget bounds it")
    max_instances: Annotated[int, Strict(), Field(ge=2, le=32)] | None = Field(
        default=None, description="prefill + decode instances at most"
    )
    max_accelerators: Annotated[int, Strict(), Field(ge=1)] | None = Field(
        default=None, description="instances × the role's pods × accelerators per pod, summed, at most"
    )
    ttft_slo_ms: PositiveMs = 2000.0
    itl_slo_ms: PositiveMs = 100.0
    interval_s: PositiveSeconds = 5.0
    window_s: PositiveSeconds = Field(default=15.0, description="the figures are measured over this window")
    cooldown_s: Annotated[float, Strict(), Field(ge=0)] = 10.0
    scale_down_intervals: Annotated[int, Strict(), Field(ge=1, le=100)] = Field(
        default=2, description="decisions in a row that must agree before capacity is removed"
    )
    hysteresis_margin: Fraction = Field(
        default=0.1, description="a role shrinks only when its need is this share below the smaller count"
    )
    max_changes_per_minute: Annotated[int, Strict(), Field(ge=1, le=60)] = 4
    max_utilization: Share = Field(
        default=0.85, description="the busiest share of its measured capacity an instance is planned for"
    )
    enable_role_conversion: Bool = Field(
        default=True, description="under a full budget, turn instances of one role into the other"
    )
    fill_budget: Bool = Field(
        default=False,
        description="keep every instance the budget allows, split between the roles by need (else the fewest "
        "instances that meet the needs)",
    )


# ---- engine sections -------------------------------------------------------------------------------------

EngineType = Literal["vllm", "sglang", "sim"]
# pyMotor's engine-level dispatch_profile names (handoff: prefill first, trigger: decode first via metaserver).
PYMOTOR_DISPATCH_PROFILES = {
    "handoff": DispatchProfile.PREFILL_FIRST,
    "trigger": DispatchProfile.DECODE_FIRST,
}


def _pymotor_profile(value: object) -> object:
    return PYMOTOR_DISPATCH_PROFILES.get(value, value) if isinstance(value, str) else value


class EngineSection(Section):
    engine_type: EngineType = "vllm"
    engine_config: dict[str, Any] = {}
    dispatch_profile: Annotated[DispatchProfile | None, BeforeValidator(_pymotor_profile)] = None
    motor_nodemanger_config: NodeManagerConfig | None = None


class KvConductorConfig(Section):
    kvevent_instance: dict[str, Any] | None = None
    http_server_port: Annotated[int, Strict(), Field(ge=0, le=65535)] = 0


class UserConfig(Section):
    version: Literal["v2.0"]
    motor_deploy_config: DeployConfig = DeployConfig()
    motor_controller_config: ControllerConfig = ControllerConfig()
    motor_coordinator_config: CoordinatorConfig = CoordinatorConfig()
    motor_nodemanger_config: NodeManagerConfig = NodeManagerConfig()
    motor_engine_prefill_config: EngineSection | None = None
    motor_engine_decode_config: EngineSection | None = None
    motor_engine_union_config: EngineSection | None = None
    motor_engine_encode_config: EngineSection | None = None
    kv_cache_pool_config: KvCachePoolConfig | None = None
    kv_cache_store_config: KvCachePoolConfig | None = None
    kv_conductor_config: KvConductorConfig | None = None
    motor_planner_config: PlannerConfig = PlannerConfig()


# ---- env.json --------------------------------------------------------------------------------------------


def _env_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value)
    raise ValueError("environment values must be strings, numbers or booleans")


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _env_name(value: str) -> str:
    if not _ENV_NAME.match(value):
        raise ValueError(
            f"{value!r} is not an environment variable name a shell accepts: letters, digits and '_', not "
            "starting with a digit; rename it"
        )
    return value


EnvValue = Annotated[str, BeforeValidator(_env_value)]
EnvName = Annotated[str, AfterValidator(_env_name)]
EnvMap = dict[EnvName, EnvValue]


class EnvConfig(Section):
    version: Literal["2.0.0"]
    motor_common_env: EnvMap = {}
    motor_controller_env: EnvMap = {}
    motor_coordinator_env: EnvMap = {}
    motor_engine_prefill_env: EnvMap = {}
    motor_engine_decode_env: EnvMap = {}
    motor_engine_union_env: EnvMap | None = None
    motor_engine_encode_env: EnvMap = {}
    motor_kv_cache_pool_env: EnvMap = {}
