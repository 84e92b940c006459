"""The plan's public data: `Plan`, its `Component`s with their probes and Secret references, and the names both
backends agree on (component names, hosts, directories)."""

from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Literal

from motor.config.topology import Role
from motor.protocol import env as env_names
from motor.protocol.specs import ComponentSpec, TlsFiles

Target = Literal["local", "kubernetes"]
ComponentKind = Literal["kv_pool", "controller", "coordinator", "planner", "node_manager"]
ProbeKind = Literal["startup", "readiness", "liveness"]

POD_IP_REF = f"$({env_names.POD_IP})"
LOCAL_HOST = "127.0.0.1"
ALL_INTERFACES = "0.0.0.0"
USER_CONFIG_FILE = "user_config.json"
ENV_CONFIG_FILE = "env.json"
KUBERNETES_CONFIG_DIR = "/etc/motor"
KUBERNETES_RUN_DIR = "/var/run/motor"

CONTROLLER = "controller"
COORDINATOR = "coordinator"
COORDINATOR_MGMT = "coordinator-mgmt"  # the Service of the coordinator's management port
KV_POOL = "kv-pool"
PLANNER = "planner"
STANDBY_SUFFIX = "-standby"

PROBE_KINDS: tuple[ProbeKind, ...] = ("startup", "readiness", "liveness")


@dataclass(frozen=True)
class Probe:
    """An HTTP GET the component answers with 200 when fine (503 otherwise) on its port named `port`."""

    kind: ProbeKind
    port: str
    path: str
    scheme: str = "http"


@dataclass(frozen=True)
class SecretEnv:
    """An environment variable a Kubernetes container takes from a Secret (`secretKeyRef`)."""

    env: str
    secret: str
    key: str


@dataclass(frozen=True)
class Component:
    name: str
    kind: ComponentKind
    argv: tuple[str, ...]
    env: dict[str, str]
    ports: dict[str, int]
    probes: tuple[Probe, ...]
    spec: ComponentSpec | None = None  # None for the pool master, which is not a motor process
    replicas: int = 1
    accelerators: int = 0
    role: Role | None = None
    index: int | None = None
    ordinal: int | None = None
    # Kubernetes: variables taken from Secrets (their values are never in `env`); locally secrets stay in `env`.
    secret_env: tuple[SecretEnv, ...] = ()
    # locally, the second process of a standby pair: the component it stands by
    standby_for: str | None = None

    def probe(self, kind: ProbeKind) -> Probe:
        return next(probe for probe in self.probes if probe.kind == kind)

    def probe_url(self, kind: ProbeKind, host: str) -> str:
        probe = self.probe(kind)
        return f"{probe.scheme}://{host}:{self.ports[probe.port]}{probe.path}"


@dataclass(frozen=True)
class Plan:
    job_id: str
    target: Target
    deploy_mode: str
    config_dir: str
    run_dir: str
    components: tuple[Component, ...]
    files: dict[str, str] = field(default_factory=dict)
    coordinator_url: str = ""
    controller_url: str = ""
    # Kubernetes Secrets built from the config: name -> key -> value (see `SecretEnv`)
    secrets: dict[str, dict[str, str]] = field(default_factory=dict)
    # the TLS a client of the management ports uses (the controller's setting; None without management TLS)
    mgmt_tls: TlsFiles | None = None

    @property
    def user_config_path(self) -> str:
        return str(PurePosixPath(self.config_dir) / USER_CONFIG_FILE)

    @property
    def env_config_path(self) -> str:
        return str(PurePosixPath(self.config_dir) / ENV_CONFIG_FILE)

    def component(self, name: str) -> Component:
        for component in self.components:
            if component.name == name:
                return component
        raise KeyError(f"no component named {name!r} in the plan (have {[c.name for c in self.components]})")

    def of_kind(self, kind: ComponentKind) -> list[Component]:
        return [component for component in self.components if component.kind == kind]

    @property
    def node_managers(self) -> list[Component]:
        return self.of_kind("node_manager")


def service_host(name: str, job_id: str) -> str:
    """The cluster DNS name of the Service `name` in namespace `job_id`."""
    return f"{name}.{job_id}.svc.cluster.local"


def probes(port: str, path: str | None = None, scheme: str = "http") -> tuple[Probe, ...]:
    """The contract's /startup, /readiness, /liveness on `port`, or one `path` for all three."""
    return tuple(Probe(kind, port, path or f"/{kind}", scheme) for kind in PROBE_KINDS)
