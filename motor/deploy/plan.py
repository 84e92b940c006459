"""The deployment plan: a validated Topology turned into the components to run (pure data, no I/O).

`build_plan(topology, target=..., config_dir=..., run_dir=...)` returns a `Plan` that both backends consume:

- `Plan.components`, in start order: the KV pool master (`kind="kv_pool"`, only when `topology.pool` is set),
  the controller, the coordinator, then one node manager per engine instance (`kind="node_manager"`, named
  like "prefill-0", with `role` and `index`).
- Each `Component` carries `argv` (the entry point from the shared contracts; config files are read from
  `Plan.config_dir`), `env` (env.json sections plus the MOTOR_* address variables), named `ports`,
  `replicas` (pods per instance; 1 for control components), `accelerators` (per pod) and `probes`
  (port + HTTP path, served by the component itself).
- `Plan.files` are generated files (name -> text) the backend must write into `config_dir` before starting
  anything, e.g. the engines' Mooncake store config pointed to by MOONCAKE_CONFIG_PATH. The backend also
  places user_config.json and env.json there (`Plan.user_config_path`, `Plan.env_config_path`).

Targets:
- "local": every component on 127.0.0.1 with the ports of motor/config/ports.py (node manager k listens on
  node_manager_port + k); argv[0] is `python` (default: this interpreter) or the `mooncake_master` next to it.
- "kubernetes": components reach each other through Services (`<name>.<job_id>.svc.cluster.local`) and
  advertise their pod IP. Env values and argv may contain "$(POD_IP)" (`POD_IP_REF`), which Kubernetes
  expands from the POD_IP variable the backend sets from the downward API (status.podIP). With
  deploy_mode single_container everything shares one pod: components reach each other at $(POD_IP) and node
  managers use the shifted local ports.
"""

import json
import sys
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Literal

from motor.config.ports import instance_ports
from motor.config.topology import Role, Topology
from motor.kv.pool import engine_store_config, master_args

Target = Literal["local", "kubernetes"]
ComponentKind = Literal["kv_pool", "controller", "coordinator", "node_manager"]
ProbeKind = Literal["startup", "readiness", "liveness"]

POD_IP_REF = "$(POD_IP)"
LOCAL_HOST = "127.0.0.1"
USER_CONFIG_FILE = "user_config.json"
ENV_CONFIG_FILE = "env.json"
STORE_CONFIG_FILE = "mooncake_store.json"
KUBERNETES_CONFIG_DIR = "/etc/motor"
KUBERNETES_RUN_DIR = "/var/run/motor"

CONTROLLER = "controller"
COORDINATOR = "coordinator"
KV_POOL = "kv-pool"
PROBE_KINDS: tuple[ProbeKind, ...] = ("startup", "readiness", "liveness")


@dataclass(frozen=True)
class Probe:
    """An HTTP GET the component answers with 200 when fine (503 otherwise) on its port named `port`."""

    kind: ProbeKind
    port: str
    path: str


@dataclass(frozen=True)
class Component:
    name: str
    kind: ComponentKind
    argv: tuple[str, ...]
    env: dict[str, str]
    ports: dict[str, int]
    probes: tuple[Probe, ...]
    replicas: int = 1
    accelerators: int = 0
    role: Role | None = None
    index: int | None = None

    def probe(self, kind: ProbeKind) -> Probe:
        return next(probe for probe in self.probes if probe.kind == kind)

    def probe_url(self, kind: ProbeKind, host: str) -> str:
        probe = self.probe(kind)
        return f"http://{host}:{self.ports[probe.port]}{probe.path}"


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


def build_plan(
    topology: Topology,
    *,
    target: Target | None = None,
    config_dir: str | None = None,
    run_dir: str | None = None,
    python: str | None = None,
) -> Plan:
    """Turn a validated topology into components.

    target defaults to "local" for deploy_mode local and "kubernetes" otherwise (pass "kubernetes" to preview
    a local config as Kubernetes objects). config_dir is where the components read user_config.json, env.json
    and `Plan.files` (default: /etc/motor in Kubernetes, required locally); run_dir is where each component
    gets its own MOTOR_RUN_DIR (`<run_dir>/<component name>`; default /var/run/motor in Kubernetes, the parent
    of config_dir locally). python is argv[0] of the motor entry points (default: this interpreter locally,
    `python3` in the image).
    """
    user = topology.user
    deploy = user.motor_deploy_config
    target = target or ("local" if deploy.deploy_mode == "local" else "kubernetes")
    if config_dir is None:
        if target == "local":
            raise ValueError("config_dir is required for a local plan: the directory holding the config copy")
        config_dir = KUBERNETES_CONFIG_DIR
    run_dir = run_dir or (
        KUBERNETES_RUN_DIR if target == "kubernetes" else str(PurePosixPath(config_dir).parent)
    )
    python = python or (sys.executable if target == "local" else "python3")
    shared_pod = target == "local" or deploy.deploy_mode == "single_container"
    layout = _Layout(target, deploy.job_id, shared_pod)
    config_args = (
        "--user-config",
        str(PurePosixPath(config_dir) / USER_CONFIG_FILE),
        "--env-config",
        str(PurePosixPath(config_dir) / ENV_CONFIG_FILE),
    )

    controller_port = user.motor_controller_config.api_config.controller_api_port
    coordinator_api = user.motor_coordinator_config.api_config
    controller_url = f"http://{layout.host(CONTROLLER)}:{controller_port}"
    coordinator_mgmt_url = f"http://{layout.host(COORDINATOR)}:{coordinator_api.coordinator_api_mgmt_port}"
    common = dict(topology.env.motor_common_env)
    addresses = {
        "MOTOR_ADVERTISE_HOST": layout.advertise_host,
        "MOTOR_CONTROLLER_URL": controller_url,
        "MOTOR_COORDINATOR_MGMT_URL": coordinator_mgmt_url,
    }

    components: list[Component] = []
    files: dict[str, str] = {}
    pool = topology.pool
    if pool is not None:
        pool_host = layout.host(KV_POOL)
        addresses["MOTOR_POOL_MASTER"] = f"{pool_host}:{pool.port}"
        files[STORE_CONFIG_FILE] = (
            json.dumps(engine_store_config(pool, master_host=pool_host), indent=2) + "\n"
        )
        master = (
            str(PurePosixPath(python).parent / "mooncake_master") if target == "local" else "mooncake_master"
        )
        components.append(
            Component(
                name=KV_POOL,
                kind="kv_pool",
                argv=(master, *master_args(pool, bind_host=layout.bind_host)),
                env=_env(common, topology.env.motor_kv_cache_pool_env, addresses, run_dir, KV_POOL),
                ports={"rpc": pool.port, "metrics": pool.metrics_port},
                probes=_probes("metrics", "/health"),
            )
        )

    components.append(
        Component(
            name=CONTROLLER,
            kind="controller",
            argv=(python, "-m", "motor.controller", *config_args),
            env=_env(common, topology.env.motor_controller_env, addresses, run_dir, CONTROLLER),
            ports={"api": controller_port},
            probes=_probes("api"),
        )
    )
    components.append(
        Component(
            name=COORDINATOR,
            kind="coordinator",
            argv=(python, "-m", "motor.coordinator", *config_args),
            env=_env(common, topology.env.motor_coordinator_env, addresses, run_dir, COORDINATOR),
            ports={
                "infer": coordinator_api.coordinator_api_infer_port,
                "mgmt": coordinator_api.coordinator_api_mgmt_port,
            },
            probes=_probes("mgmt"),
        )
    )

    for ports in instance_ports(topology.roles):
        spec = topology.roles[ports.role]  # type: ignore[index]
        if shared_pod:
            nm_port, engine_port, status_port = (
                ports.node_manager_port,
                ports.engine_port,
                ports.engine_status_port,
            )
        else:
            nm_port = spec.node_manager.api_config.node_manager_port
            engine_port = spec.node_manager.endpoint_config.base_port
            status_port = engine_port + 1
        engine_env = dict(addresses)
        if pool is not None:
            engine_env["MOONCAKE_CONFIG_PATH"] = str(PurePosixPath(config_dir) / STORE_CONFIG_FILE)
        components.append(
            Component(
                name=ports.name,
                kind="node_manager",
                argv=(
                    python,
                    "-m",
                    "motor.node_manager",
                    *config_args,
                    "--role",
                    ports.role,
                    "--index",
                    str(ports.index),
                ),
                env=_env(spec.env, {}, engine_env, run_dir, ports.name),
                ports={"nm": nm_port, "engine": engine_port, "engine-status": status_port},
                probes=_probes("nm"),
                replicas=spec.pods_per_instance,
                accelerators=spec.accelerators_per_pod,
                role=spec.role,
                index=ports.index,
            )
        )

    coordinator_host = LOCAL_HOST if target == "local" else service_host(COORDINATOR, deploy.job_id)
    return Plan(
        job_id=deploy.job_id,
        target=target,
        deploy_mode="local" if deploy.deploy_mode == "local" else deploy.kubernetes_layout,
        config_dir=config_dir,
        run_dir=run_dir,
        components=tuple(components),
        files=files,
        coordinator_url=f"http://{coordinator_host}:{coordinator_api.coordinator_api_infer_port}",
        controller_url=controller_url,
    )


@dataclass(frozen=True)
class _Layout:
    target: Target
    job_id: str
    shared_pod: bool

    @property
    def advertise_host(self) -> str:
        return LOCAL_HOST if self.target == "local" else POD_IP_REF

    @property
    def bind_host(self) -> str:
        return LOCAL_HOST if self.target == "local" else "0.0.0.0"

    def host(self, service: str) -> str:
        if self.target == "local":
            return LOCAL_HOST
        return POD_IP_REF if self.shared_pod else service_host(service, self.job_id)


def _env(
    base: dict[str, str], section: dict[str, str], addresses: dict[str, str], run_dir: str, name: str
) -> dict[str, str]:
    return {**base, **section, **addresses, "MOTOR_RUN_DIR": str(PurePosixPath(run_dir) / name)}


def _probes(port: str, path: str | None = None) -> tuple[Probe, ...]:
    """The contract's /startup, /readiness, /liveness on `port`, or one `path` for all three."""
    return tuple(Probe(kind, port, path or f"/{kind}") for kind in PROBE_KINDS)
