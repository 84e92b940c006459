"""The deployment plan: a validated Topology compiled into the components to run (pure data, no I/O).

`build_plan(topology, target=..., config_dir=..., run_dir=...)` returns a `Plan` that both backends consume:

- `Plan.components`, in start order: the KV pool master (`kind="kv_pool"`, only when `topology.pool` is set),
  the controller, the coordinator, then one node manager per engine instance (`kind="node_manager"`, named
  like "prefill-0", with `role` and `index`).
- Each motor component carries its compiled spec (`motor.protocol.specs`: ports, URLs, the resolved dispatch
  profile, the engine command, the store config, credentials by reference) and `argv` =
  `python -m motor.<component> --spec <config_dir>/<name>.spec.json`; the pool master's `argv` is the
  `mooncake_master` command. `env` holds the env.json sections plus MOTOR_ADVERTISE_HOST and MOTOR_RUN_DIR;
  `ports` are named, `replicas` is pods per instance (1 for control components), `accelerators` per pod,
  `probes` (port + HTTP path, served by the component itself); a node manager also has its `ordinal` (k: its
  ports and store lookup ids on a shared host).
- `Plan.files` (name -> text) are what the backend writes into `config_dir` before starting anything: the spec
  of every motor component. The backend also places the user's user_config.json and env.json there
  (`Plan.user_config_path`, `Plan.env_config_path`) as the baseline of later updates; no component reads them.

Targets:
- "local": every component on 127.0.0.1 with the ports of motor/config/ports.py (node manager k listens on
  node_manager_port + k); argv[0] is `python` (default: this interpreter) or the `mooncake_master` next to it.
- "kubernetes": components reach each other through Services (`<name>.<job_id>.svc.cluster.local`) and
  advertise their pod IP: argv and env may contain "$(POD_IP)" (`POD_IP_REF`), which Kubernetes expands from
  the POD_IP variable the backend sets from the downward API, and specs say `HOST_PLACEHOLDER`, which a
  component replaces with MOTOR_ADVERTISE_HOST when it loads its spec. With deploy_mode single_container
  everything shares one pod: components reach each other at the pod IP and node managers use the shifted
  local ports.
"""

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Literal

from motor.config.errors import ConfigError, ConfigIssue
from motor.config.models import CoordinatorConfig
from motor.config.ports import instance_ports
from motor.config.tls import CONTROLLER as TLS_CONTROLLER
from motor.config.tls import COORDINATOR as TLS_COORDINATOR
from motor.config.tls import TlsSetting, node_manager_key
from motor.config.topology import Role, RoleSpec, Topology
from motor.deploy.engine_command import LaunchError, engine_spec, served_model_name
from motor.kv.connectors import DispatchProfile
from motor.kv.pool import engine_store_config, master_args
from motor.protocol import env as env_names
from motor.protocol.credentials import instance_credential_env, is_motor_credential
from motor.protocol.credentials import is_credential_env as is_secret_name
from motor.protocol.specs import (
    HOST_PLACEHOLDER,
    ComponentSpec,
    ControllerSpec,
    CoordinatorSpec,
    EtcdSpec,
    NodeManagerSpec,
    RegistrationPolicy,
    RolePorts,
    SecretRef,
    TlsFiles,
    dump_spec,
    spec_file_name,
    url_scheme,
)

Target = Literal["local", "kubernetes"]
ComponentKind = Literal["kv_pool", "controller", "coordinator", "node_manager"]
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

# Kubernetes Secrets: the controller token motor generates once, what the config itself holds (API keys,
# env.json credentials) keyed by variable name, and the node managers' credentials keyed by instance id.
TOKEN_SECRET = "motor-controller-token"
TOKEN_KEY = "token"
CREDENTIALS_SECRET = "motor-credentials"
INSTANCE_CREDENTIALS_SECRET = "motor-instance-credentials"
ETCD_AUTH_KEYS = {env_names.ETCD_USERNAME: "username", env_names.ETCD_PASSWORD: "password"}
PROBE_KINDS: tuple[ProbeKind, ...] = ("startup", "readiness", "liveness")
# Where registrations may point: loopback locally; on Kubernetes the pod networks (`pod_networks`), by default
# the private ranges, which keeps out loopback, link-local (cloud metadata) and public addresses.
LOOPBACK_NETWORKS = ("127.0.0.0/8", "::1/128")
PRIVATE_NETWORKS = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7")
# Ordinals on a shared host stay below twice the instance count (motor.config.ports), at most 3 roles x 16.
SHARED_HOST_ORDINALS = 2 * 3 * 16


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


def build_plan(
    topology: Topology,
    *,
    target: Target | None = None,
    config_dir: str | None = None,
    run_dir: str | None = None,
    python: str | None = None,
    kept_ordinals: Mapping[str, int] | None = None,
) -> Plan:
    """Compile a validated topology into components; raise ConfigError when an engine section cannot be
    turned into a command line.

    target defaults to "local" for deploy_mode local and "kubernetes" otherwise (pass "kubernetes" to preview
    a local config as Kubernetes objects). config_dir is where the components read user_config.json, env.json
    and `Plan.files` (default: /etc/motor in Kubernetes, required locally); run_dir is where each component
    gets its own MOTOR_RUN_DIR (`<run_dir>/<component name>`; default /var/run/motor in Kubernetes, the parent
    of config_dir locally). python is argv[0] of the motor entry points (default: this interpreter locally,
    `python3` in the image). kept_ordinals: instance name → the ordinal it keeps (a scaled local job keeps the
    ports of the instances it keeps; see motor.config.ports).
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
    layout = _Layout(target, deploy.job_id, target == "local" or deploy.deploy_mode == "single_container")
    token = SecretRef(env=env_names.CONTROLLER_TOKEN)
    common = dict(topology.env.motor_common_env)
    files: dict[str, str] = {}
    components: list[Component] = []
    secrets = _Secrets(target == "kubernetes")
    tls = topology.tls
    controller_tls = tls_files(tls.mgmt_of(TLS_CONTROLLER))
    coordinator_tls = tls_files(tls.mgmt_of(TLS_COORDINATOR))
    infer_tls = tls_files(tls.infer)

    def motor_component(component: Component, *, split: bool = True) -> Component:
        """The component with its argv and, unless `split` was done already, its credentials split off."""
        assert component.spec is not None
        name = spec_file_name(component.name)
        files[name] = dump_spec(component.spec)
        argv = (python, "-m", f"motor.{component.kind}", "--spec", str(PurePosixPath(config_dir) / name))
        if not split:
            return Component(**{**component.__dict__, "argv": argv})
        env, secret_env = secrets.split(component.kind, component.env)
        return Component(**{**component.__dict__, "argv": argv, "env": env, "secret_env": secret_env})

    def component_run_dir(name: str) -> str:
        return str(PurePosixPath(run_dir) / name)

    def base_spec(name: str, log_level: str) -> dict[str, object]:
        return {
            "name": name,
            "job_id": deploy.job_id,
            "log_level": log_level,
            "advertise_host": layout.spec_host,
            "bind_host": layout.spec_host,
            "run_dir": component_run_dir(name),
        }

    controller_api = user.motor_controller_config.api_config
    coordinator_api = user.motor_coordinator_config.api_config
    controller_url = f"{url_scheme(controller_tls)}://{layout.spec_url_host(CONTROLLER)}:{controller_api.controller_api_port}"
    coordinator_mgmt_url = (
        f"{url_scheme(coordinator_tls)}://{layout.spec_url_host(COORDINATOR_MGMT)}"
        f":{coordinator_api.coordinator_api_mgmt_port}"
    )

    pool = topology.pool
    store_config = None
    if pool is not None:
        store_config = engine_store_config(pool, master_host=layout.spec_url_host(KV_POOL))
        master = (
            str(PurePosixPath(python).parent / "mooncake_master") if target == "local" else "mooncake_master"
        )
        pool_env, pool_secret_env = secrets.split(
            "kv_pool", _env(common, topology.env.motor_kv_cache_pool_env, layout, component_run_dir(KV_POOL))
        )
        components.append(
            Component(
                name=KV_POOL,
                kind="kv_pool",
                argv=(master, *master_args(pool, bind_host=layout.bind_host)),
                env=pool_env,
                ports={"rpc": pool.port, "metrics": pool.metrics_port},
                probes=_probes("metrics", "/health"),
                secret_env=pool_secret_env,
            )
        )

    controller = user.motor_controller_config
    instance = controller.instance_config
    if controller.etcd_config.enable_etcd_persistence:
        secrets.etcd_auth_secret = controller.etcd_config.etcd_auth_secret

    # split in start order (the controller first), which numbers repeated credential keys of the Secret
    controller_env, controller_secret_env = secrets.split(
        "controller", _env(common, topology.env.motor_controller_env, layout, component_run_dir(CONTROLLER))
    )

    def controller_component(registration: RegistrationPolicy) -> Component:
        return motor_component(
            Component(
                name=CONTROLLER,
                kind="controller",
                argv=(),
                env=controller_env,
                secret_env=controller_secret_env,
                ports={"api": controller_api.controller_api_port},
                probes=_probes("api", scheme=url_scheme(controller_tls)),
                spec=ControllerSpec(
                    **base_spec(CONTROLLER, controller.logging_config.log_level),  # type: ignore[arg-type]
                    port=controller_api.controller_api_port,
                    token=token,
                    coordinator_urls=[coordinator_mgmt_url],
                    heartbeat_timeout=instance.instance_heartbeat_timeout,
                    expired_timeout=instance.instance_expired_timeout,
                    check_interval=instance.instance_manager_check_interval,
                    reconcile_interval=controller.event_config.coordinator_heartbeat_interval,
                    registration=registration,
                    etcd=etcd_spec(topology) if controller.etcd_config.enable_etcd_persistence else None,
                    mgmt_tls=controller_tls,
                ),
            ),
            split=False,
        )

    # The controller's registration policy needs the node managers' ports: it takes its place here once they
    # are compiled.
    controller_position = len(components)

    coordinator = user.motor_coordinator_config
    coordinator_base = base_spec(COORDINATOR, coordinator.logging_config.log_level)
    if target == "kubernetes":
        # The Service and probes reach the pod IP and `kubectl port-forward` reaches loopback: listen on both.
        coordinator_base["bind_host"] = ALL_INTERFACES
    api_keys = coordinator.api_key_config.valid_keys
    coordinator_env = _env(common, topology.env.motor_coordinator_env, layout, component_run_dir(COORDINATOR))
    if api_keys:
        coordinator_env[env_names.API_KEYS] = "\n".join(api_keys)
    components.append(
        motor_component(
            Component(
                name=COORDINATOR,
                kind="coordinator",
                argv=(),
                env=coordinator_env,
                ports={
                    "infer": coordinator_api.coordinator_api_infer_port,
                    "mgmt": coordinator_api.coordinator_api_mgmt_port,
                },
                probes=_probes("mgmt", scheme=url_scheme(coordinator_tls)),
                spec=CoordinatorSpec(
                    **coordinator_base,  # type: ignore[arg-type]
                    config=coordinator_without_secrets(coordinator),
                    profile=topology.profile.profile,
                    required_roles=required_roles(topology.profile.profile, set(topology.roles)),
                    served_models=served_model_names(topology),
                    engine_types=sorted({spec.engine_type for spec in topology.roles.values()}),
                    infer_port=coordinator_api.coordinator_api_infer_port,
                    mgmt_port=coordinator_api.coordinator_api_mgmt_port,
                    controller_token=token,
                    api_keys=SecretRef(env=env_names.API_KEYS)
                    if coordinator.api_key_config.enable_api_key
                    else None,
                    infer_tls=infer_tls,
                    mgmt_tls=coordinator_tls,
                ),
            )
        )
    )

    problems: dict[str, ConfigIssue] = {}
    role_ports: dict[Role, RolePorts] = {}
    for ports in instance_ports(topology.roles, kept_ordinals):
        role_spec = topology.roles[ports.role]  # type: ignore[index]
        if layout.shared_pod:
            nm_port, engine_port, status_port = (
                ports.node_manager_port,
                ports.engine_port,
                ports.engine_status_port,
            )
            bootstrap_port, ordinal = ports.kv_bootstrap_port, ports.ordinal
        else:
            nm_port = role_spec.node_manager.api_config.node_manager_port
            engine_port = role_spec.node_manager.endpoint_config.base_port
            status_port = engine_port + 1
            bootstrap_port, ordinal = None, 0
        nm_run_dir = component_run_dir(ports.name)
        nm_tls = tls_files(tls.mgmt_of(node_manager_key(role_spec.role)))
        try:
            engine = engine_spec(
                role_spec,
                instance_id=ports.name,
                host=layout.spec_host,
                port=engine_port,
                status_port=status_port,
                store_config=store_config,
                run_dir=nm_run_dir,
                python=python,
                bootstrap_port=bootstrap_port,
                store_lookup_ordinal=ordinal,
            )
            engine = engine.model_copy(
                update={
                    "env": {name: value for name, value in engine.env.items() if not is_secret_name(name)},
                    "secret_env": [
                        SecretRef(env=name)
                        for name in engine.env
                        if is_secret_name(name) and not is_motor_credential(name)
                    ],
                }
            )
            model_name = served_model_name(role_spec)
        except LaunchError as exc:
            problems.setdefault(str(exc), ConfigIssue(exc.path, exc.message))
            continue
        bootstrap = engine.bootstrap_port
        if bootstrap is not None and layout.shared_pod:
            bootstrap -= ports.index  # instance i serves on the role's bootstrap port + i
        role_ports.setdefault(
            role_spec.role,
            RolePorts(
                node_manager_port=role_spec.node_manager.api_config.node_manager_port,
                engine_port=role_spec.node_manager.endpoint_config.base_port,
                bootstrap_port=bootstrap,
            ),
        )
        credential = SecretRef(env=instance_credential_env(ports.name))
        nm_env, nm_secret_env = secrets.split("node_manager", _env(role_spec.env, {}, layout, nm_run_dir))
        if target == "kubernetes":
            nm_secret_env += (SecretEnv(credential.env, INSTANCE_CREDENTIALS_SECRET, ports.name),)
        components.append(
            motor_component(
                Component(
                    name=ports.name,
                    kind="node_manager",
                    argv=(),
                    env=nm_env,
                    secret_env=nm_secret_env,
                    ports={"nm": nm_port, "engine": engine_port, "engine-status": status_port},
                    probes=_probes("nm", scheme=url_scheme(nm_tls)),
                    replicas=role_spec.pods_per_instance,
                    accelerators=role_spec.accelerators_per_pod,
                    role=role_spec.role,
                    index=ports.index,
                    ordinal=ordinal if layout.shared_pod else None,
                    spec=NodeManagerSpec(
                        **base_spec(ports.name, role_spec.node_manager.logging_config.log_level),  # type: ignore[arg-type]
                        instance_id=ports.name,
                        role=role_spec.role,
                        model_name=model_name,
                        port=nm_port,
                        controller_url=controller_url,
                        credential=credential,
                        heartbeat_interval=role_spec.node_manager.basic_config.heartbeat_interval_seconds,
                        engine=engine,
                        mgmt_tls=nm_tls,
                    ),
                ),
                split=False,
            )
        )

    if problems:
        raise ConfigError(list(problems.values()))
    registration = RegistrationPolicy(
        networks=list(LOOPBACK_NETWORKS if target == "local" else deploy.pod_networks or PRIVATE_NETWORKS),
        scheme=url_scheme(controller_tls),
        roles=role_ports,
        shared_host=layout.shared_pod,
        ordinals=SHARED_HOST_ORDINALS,
    )
    components.insert(controller_position, controller_component(registration))
    coordinator_host = LOCAL_HOST if target == "local" else service_host(COORDINATOR, deploy.job_id)
    return Plan(
        job_id=deploy.job_id,
        target=target,
        deploy_mode="local" if deploy.deploy_mode == "local" else deploy.kubernetes_layout,
        config_dir=config_dir,
        run_dir=run_dir,
        components=tuple(components),
        files=files,
        coordinator_url=(
            f"{url_scheme(infer_tls)}://{coordinator_host}:{coordinator_api.coordinator_api_infer_port}"
        ),
        controller_url=(
            f"{url_scheme(controller_tls)}://"
            f"{LOCAL_HOST if target == 'local' else service_host(CONTROLLER, deploy.job_id)}"
            f":{controller_api.controller_api_port}"
        ),
        secrets=secrets.secrets(),
        mgmt_tls=controller_tls,
    )


def tls_files(setting: TlsSetting | None) -> TlsFiles | None:
    """An enabled TLS setting as the paths a spec carries."""
    return None if setting is None else TlsFiles(**setting.config.paths)


def etcd_spec(topology: Topology) -> EtcdSpec:
    etcd = topology.user.motor_controller_config.etcd_config
    return EtcdSpec(
        host=etcd.etcd_host,
        port=etcd.etcd_port,
        timeout=etcd.etcd_timeout,
        tls=tls_files(topology.tls.etcd),
        username=SecretRef(env=env_names.ETCD_USERNAME),
        password=SecretRef(env=env_names.ETCD_PASSWORD),
    )


def coordinator_without_secrets(config: CoordinatorConfig) -> CoordinatorConfig:
    """The coordinator section as its spec carries it: no API keys (the spec names MOTOR_API_KEYS instead) and
    no TLS sections (the spec's own infer_tls / mgmt_tls replace them)."""
    return config.model_copy(
        update={
            "api_key_config": config.api_key_config.model_copy(update={"valid_keys": []}),
            "infer_tls_config": None,
            "mgmt_tls_config": None,
        }
    )


# Which motor component may hold which of motor's own secrets (least privilege).
_MOTOR_SECRETS_OF: dict[str, tuple[str, ...]] = {
    "controller": (env_names.CONTROLLER_TOKEN, *ETCD_AUTH_KEYS),
    "coordinator": (env_names.CONTROLLER_TOKEN, env_names.API_KEYS),
    "node_manager": (),  # its own instance's credential only (`instance_credential_env`)
    "kv_pool": (),
}


class _Secrets:
    """Keeps credentials out of plain environments. Each component keeps only the motor secrets its kind uses;
    for Kubernetes every credential value moves into the credentials Secret (keyed by its variable name, with
    -2, -3... when components disagree on the value) and the component names it in `secret_env`; the
    controller token, unless env.json sets it, comes from the token Secret motor generates."""

    def __init__(self, kubernetes: bool) -> None:
        self._kubernetes = kubernetes
        self._data: dict[str, str] = {}
        self.etcd_auth_secret: str | None = None

    def split(self, kind: str, env: dict[str, str]) -> tuple[dict[str, str], tuple[SecretEnv, ...]]:
        allowed = _MOTOR_SECRETS_OF[kind]
        env = {name: value for name, value in env.items() if not is_motor_credential(name) or name in allowed}
        if not self._kubernetes:
            return env, ()
        plain: dict[str, str] = {}
        secret_env: list[SecretEnv] = []
        for name, value in env.items():
            if is_secret_name(name):
                secret_env.append(SecretEnv(name, CREDENTIALS_SECRET, self._key(name, value)))
            else:
                plain[name] = value
        if env_names.CONTROLLER_TOKEN in allowed and env_names.CONTROLLER_TOKEN not in env:
            secret_env.append(SecretEnv(env_names.CONTROLLER_TOKEN, TOKEN_SECRET, TOKEN_KEY))
        if kind == "controller" and self.etcd_auth_secret:
            secret_env = [item for item in secret_env if item.env not in ETCD_AUTH_KEYS]
            secret_env += [
                SecretEnv(name, self.etcd_auth_secret, key) for name, key in ETCD_AUTH_KEYS.items()
            ]
        return plain, tuple(secret_env)

    def secrets(self) -> dict[str, dict[str, str]]:
        return {CREDENTIALS_SECRET: dict(self._data)} if self._data else {}

    def _key(self, name: str, value: str) -> str:
        key, suffix = name, 1
        while key in self._data and self._data[key] != value:
            suffix += 1
            key = f"{name}-{suffix}"
        self._data[key] = value
        return key


def required_roles(profile: DispatchProfile, configured: set[Role]) -> list[Role]:
    """The roles whose active instances make the coordinator ready for its profile."""
    if profile != DispatchProfile.AGGREGATED:
        return ["prefill", "decode"]
    return ["union"] if "union" in configured or not configured else ["prefill"]


def served_model_names(topology: Topology) -> list[str]:
    """Names clients may ask for: each role's `served_model_name` (str or list), else its `model`."""
    names: list[str] = []
    for spec in topology.roles.values():
        names.extend(_served_names(spec))
    return list(dict.fromkeys(names))


def _served_names(spec: RoleSpec) -> list[str]:
    served = spec.engine_config.get("served_model_name") or spec.engine_config.get("model")
    values = served if isinstance(served, list) else [served]
    return [str(value) for value in values if value]


@dataclass(frozen=True)
class _Layout:
    target: Target
    job_id: str
    shared_pod: bool

    @property
    def advertise_host(self) -> str:
        """MOTOR_ADVERTISE_HOST in a component's environment."""
        return LOCAL_HOST if self.target == "local" else POD_IP_REF

    @property
    def spec_host(self) -> str:
        """A component's own address as its spec says it."""
        return LOCAL_HOST if self.target == "local" else HOST_PLACEHOLDER

    @property
    def bind_host(self) -> str:
        return LOCAL_HOST if self.target == "local" else ALL_INTERFACES

    def spec_url_host(self, service: str) -> str:
        """Where a spec says another component is reached."""
        if self.target == "local":
            return LOCAL_HOST
        return HOST_PLACEHOLDER if self.shared_pod else service_host(service, self.job_id)


def _env(base: dict[str, str], section: dict[str, str], layout: _Layout, run_dir: str) -> dict[str, str]:
    return {**base, **section, env_names.ADVERTISE_HOST: layout.advertise_host, env_names.RUN_DIR: run_dir}


def _probes(port: str, path: str | None = None, scheme: str = "http") -> tuple[Probe, ...]:
    """The contract's /startup, /readiness, /liveness on `port`, or one `path` for all three."""
    return tuple(Probe(kind, port, path or f"/{kind}", scheme) for kind in PROBE_KINDS)
