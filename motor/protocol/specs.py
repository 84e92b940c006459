"""Compiled per-process specs: what `motor.deploy.plan` decides for each component, as typed JSON files.

The plan validates the topology once and writes one spec per process; a component starts from
`--spec FILE` (locally) or the same file mounted from the ConfigMap (Kubernetes) and never reads
user_config.json / env.json again. Two things stay out of a spec on purpose:

- addresses only the pod knows: a spec written for Kubernetes says `HOST_PLACEHOLDER` wherever the pod IP
  belongs (the component's own address, its engine's flags, a pod-local URL), and `load_spec` replaces it with
  `MOTOR_ADVERTISE_HOST` (motor.protocol.env), which Kubernetes sets from the pod IP;
- secrets: a spec names the environment variable that holds one (`SecretRef`), never its value.
"""

import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from motor.config.models import CoordinatorConfig, LogLevel, PlannerConfig
from motor.config.planner import PlannerBounds
from motor.kv.connectors import DispatchProfile
from motor.protocol import env
from motor.protocol.instances import InstanceRole

SPEC_VERSION = 1
HOST_PLACEHOLDER = "{advertise_host}"

Port = Annotated[int, Field(ge=1, le=65535)]
Seconds = Annotated[float, Field(gt=0)]


class SpecModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SecretRef(SpecModel):
    """A secret the component reads from its environment; the spec only names the variable."""

    env: str

    def resolve(self, environ: Mapping[str, str] = os.environ) -> str:
        return environ.get(self.env, "")


class TlsFiles(SpecModel):
    """One TLS setting as file paths, never key material. A server presents cert_file/key_file and, with
    ca_file, requires client certificates signed by it; a client verifies servers with ca_file (else the
    system's trust store) and presents cert_file/key_file when set. passwd_file holds key_file's password;
    crl_file revokes certificates of ca_file's chain."""

    cert_file: str | None = None
    key_file: str | None = None
    ca_file: str | None = None
    passwd_file: str | None = None
    crl_file: str | None = None


class EtcdSpec(SpecModel):
    """The controller's etcd: where, how long to wait, TLS, and the credentials by reference (authentication is
    on when the username variable is set)."""

    host: str
    port: Port
    timeout: Seconds
    tls: TlsFiles | None = None
    username: SecretRef
    password: SecretRef


def url_scheme(tls: TlsFiles | None) -> str:
    return "https" if tls is not None else "http"


def _network(value: str) -> str:
    try:
        return str(ipaddress.ip_network(value))
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a network in CIDR notation, e.g. 10.244.0.0/16: {exc}") from None


Network = Annotated[str, AfterValidator(_network)]


class RolePorts(SpecModel):
    """The ports the plan gives the node managers and engines of one role (the first instance's, on a shared
    host)."""

    node_manager_port: Port
    engine_port: Port = Field(description="the engine's OpenAI API port; its status port is the next one")
    bootstrap_port: Port | None = Field(default=None, description="a producer's KV bootstrap port")


class RegistrationPolicy(SpecModel):
    """What a registration may announce: the controller calls the node manager URL it names and the
    coordinators send requests to its endpoints, so an address outside the job is refused (no SSRF through
    registration)."""

    networks: list[Network] = Field(
        min_length=1, description="node managers and engines have addresses inside these networks"
    )
    scheme: Literal["http", "https"] = Field(description="of node manager URLs (https with management TLS)")
    roles: dict[InstanceRole, RolePorts]
    shared_host: bool = Field(
        description="instances share a host: the one of ordinal k uses node_manager_port + k, engine_port + 2k "
        "and bootstrap_port + its index (motor.config.ports)"
    )
    ordinals: int = Field(ge=1, description="on a shared host, the ordinals the plan can hand out")


class ComponentSpec(SpecModel):
    spec_version: Literal[1] = SPEC_VERSION
    name: str
    job_id: str
    log_level: LogLevel = "INFO"
    advertise_host: str = Field(description="where the other components reach this one")
    bind_host: str = Field(description="the address its servers listen on")
    run_dir: str


class StandbySpec(SpecModel):
    """Leader election for a component that runs as a pair: the process holding `lock_key` in etcd (a lease of
    `lease_ttl` s, refreshed every `refresh_interval` s) binds the component's ports and serves; the other waits,
    trying at least every `retry_interval` s. Both answer probes on `probe_port` (readiness 503 while standby)."""

    lock_key: str
    lease_ttl: int = Field(ge=2)
    refresh_interval: Seconds
    retry_interval: Seconds
    max_failures: int = Field(ge=1, description="failed refreshes in a row before the leader says so loudly")
    probe_port: Port
    etcd: EtcdSpec


class ControllerSpec(ComponentSpec):
    kind: Literal["controller"] = "controller"
    port: Port
    token: SecretRef
    coordinator_urls: list[str] = Field(min_length=1)
    heartbeat_timeout: Seconds
    expired_timeout: Seconds
    check_interval: Seconds
    reconcile_interval: Seconds
    registration: RegistrationPolicy
    etcd: EtcdSpec | None = None
    mgmt_tls: TlsFiles | None = Field(default=None, description="its API and its calls to the others")
    standby: StandbySpec | None = None


class PoolTierSpec(SpecModel):
    """What the prefill/union engines write to the KV pool, so the coordinator can ask the pool how much of a
    prompt it holds (motor.kv.pool_keys)."""

    store_config: dict[str, Any] = Field(
        description="the store client's config: the engines' master, contributing no memory segment"
    )
    key_scheme: Literal["motor-sim", "vllm-mooncake-store"]
    model: str = Field(
        description="motor-sim: the served model name; vllm-mooncake-store: the engines' --model"
    )
    kv_bytes_per_token: int = Field(default=1024, ge=1, description="motor-sim: part of its root hash")
    key_tp_ranks: int = Field(default=1, ge=1, description="vllm-mooncake-store: tp_rank values in its keys")


class KvIndexSpec(SpecModel):
    """How the prefill/union engines hash their prefix-cache blocks, and where their tokenizer is: what the
    coordinator's kv_cache_affinity needs to compute the same block hashes (motor.kv.block_hashes)."""

    block_size: int = Field(ge=1)
    hash_algorithm: str
    hash_seed: str | None = Field(
        default=None, description="the engines' PYTHONHASHSEED; None: vLLM's fixed seed"
    )
    engine_type: str
    model_path: str | None = None
    pool: PoolTierSpec | None = Field(default=None, description="None: the pool is not asked")


class CoordinatorSpec(ComponentSpec):
    kind: Literal["coordinator"] = "coordinator"
    config: CoordinatorConfig
    profile: DispatchProfile
    required_roles: list[InstanceRole] = Field(
        min_length=1, description="the roles whose instances make the coordinator ready for its profile"
    )
    served_models: list[str]
    engine_types: list[str] = Field(description="engine types of the configured roles (vllm, sim, ...)")
    infer_port: Port
    mgmt_port: Port
    controller_token: SecretRef
    api_keys: SecretRef | None = Field(
        default=None, description="api_key_config.valid_keys, one per line (the config in the spec has none)"
    )
    infer_tls: TlsFiles | None = None
    mgmt_tls: TlsFiles | None = None
    standby: StandbySpec | None = None
    kv_index: KvIndexSpec | None = None


class EngineSpec(SpecModel):
    """How the node manager starts its engine: the engine server wrapping vLLM or the simulator."""

    engine_type: str
    argv: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(
        description="env.json's section and what the topology adds; the engine gets these, the allowlisted part "
        "of the node manager's environment (motor.node_manager.engine_env) and `secret_env`"
    )
    secret_env: list[SecretRef] = Field(
        default=[],
        description="env.json credentials (HF_TOKEN, ...) the engine takes from the node manager's environment; "
        "motor's own secrets are never among them",
    )
    files: dict[str, str] = Field(description="path -> content, written before every start")
    port: Port
    status_port: Port
    bootstrap_port: Port | None = Field(default=None, description="KV bootstrap endpoint (concurrent)")
    kv_events: str | None = Field(
        default=None, description="the ZMQ address coordinators subscribe to for the engine's KV events"
    )
    kv_events_replay: str | None = Field(default=None, description="the engine's KV event replay address")
    log_path: str
    pid_path: str


class NodeManagerSpec(ComponentSpec):
    kind: Literal["node_manager"] = "node_manager"
    instance_id: str
    role: InstanceRole
    model_name: str
    port: Port
    controller_url: str
    credential: SecretRef = Field(
        description="its instance's registration credential (motor.protocol.credentials), not the controller token"
    )
    heartbeat_interval: Seconds
    engine: EngineSpec
    mgmt_tls: TlsFiles | None = Field(default=None, description="its API and its calls to the controller")


class PlannerSpec(ComponentSpec):
    """The SLO planner: its config and resolved bounds, where it reads the instances and figures, and the scale
    path it acts through: the local job in `job_dir`, or the Kubernetes deployment in `namespace`."""

    kind: Literal["planner"] = "planner"
    port: Port
    config: PlannerConfig
    bounds: PlannerBounds
    controller_url: str
    coordinator_mgmt_url: str
    token: SecretRef = Field(description="the controller token: lists instances, drains them")
    mgmt_tls: TlsFiles | None = Field(default=None, description="its API and its calls to the others")
    backend: Literal["local", "kubernetes"]
    job_dir: str | None = Field(default=None, description="local: the job's run directory")
    namespace: str | None = Field(default=None, description="kubernetes: the job's namespace")


Spec = ControllerSpec | CoordinatorSpec | NodeManagerSpec | PlannerSpec
S = TypeVar("S", bound=ComponentSpec)


class SpecError(ValueError):
    """A spec file is missing, unreadable or not the spec this component expects."""


def spec_file_name(component: str) -> str:
    return f"{component}.spec.json"


def dump_spec(spec: ComponentSpec) -> str:
    return spec.model_dump_json(indent=2, exclude_none=True) + "\n"


def load_spec(path: str | Path, kind: type[S], environ: Mapping[str, str] = os.environ) -> S:
    """Read a spec file written by the plan, binding `HOST_PLACEHOLDER`; errors name the file and the field."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot read spec {path}: {exc.strerror}") from exc
    if HOST_PLACEHOLDER in text:
        host = environ.get(env.ADVERTISE_HOST, "")
        if not host:
            raise SpecError(
                f"{path} leaves this pod's address to the environment, but {env.ADVERTISE_HOST} is not set"
            )
        text = text.replace(HOST_PLACEHOLDER, host)
    try:
        return kind.model_validate_json(text)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or '(document)'}: {error['msg']}"
            for error in exc.errors()
        )
        raise SpecError(
            f"{path} is not a valid {kind.__name__} (spec_version {SPEC_VERSION}): {problems}; "
            "regenerate it with `motor deploy` (or `motor validate --explain`)"
        ) from exc
