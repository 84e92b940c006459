"""The deployment plan: a validated Topology compiled into the components to run (pure data, no I/O).

`build_plan(topology, target=..., config_dir=..., run_dir=...)` returns a `Plan` that both backends consume:

- `Plan.components`, in start order: the KV pool master (`kind="kv_pool"`, only when `topology.pool` is set),
  the controller, the coordinator, the planner (only when motor_planner_config enables it), then one node
  manager per engine instance (`kind="node_manager"`, named
  like "prefill-0", with `role` and `index`). With `standby_config.enable_master_standby` the controller
  (coordinator) runs as a pair that elects its leader in etcd: locally a second component
  "controller-standby" ("coordinator-standby", `standby_for` naming the first) with the same ports, bound only
  by the leader; on Kubernetes the component's Deployment has 2 replicas. Either way each process answers its
  probes on its own `probe` port (readiness 503 while standby).
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

How: `plan_context` resolves once what every compiler reads (`context.PlanContext`, frozen); one compiler per
component kind (`kv_pool`, `controller`, `coordinator`, `planner`, `node_managers`) turns it into components;
`credentials.split_credentials` then moves credentials out of their environments in start order. This module
re-exports the plan's public data (`model`) and the Secret names the backends use.
"""

from collections.abc import Mapping

from motor.config.topology import Topology
from motor.deploy.plan.context import PlanContext, plan_context
from motor.deploy.plan.controller import compile_controller, etcd_auth_secret, registration_policy
from motor.deploy.plan.coordinator import compile_coordinator, required_roles
from motor.deploy.plan.credentials import (
    CREDENTIALS_SECRET,
    ETCD_AUTH_KEYS,
    INSTANCE_CREDENTIALS_SECRET,
    TOKEN_KEY,
    TOKEN_SECRET,
    is_secret_name,
    split_credentials,
)
from motor.deploy.plan.kv_pool import compile_kv_pool
from motor.deploy.plan.model import (
    ALL_INTERFACES,
    CONTROLLER,
    COORDINATOR,
    COORDINATOR_MGMT,
    ENV_CONFIG_FILE,
    KUBERNETES_CONFIG_DIR,
    KUBERNETES_RUN_DIR,
    KV_POOL,
    LOCAL_HOST,
    PLANNER,
    POD_IP_REF,
    PROBE_KINDS,
    STANDBY_SUFFIX,
    USER_CONFIG_FILE,
    Component,
    ComponentKind,
    Plan,
    Probe,
    ProbeKind,
    SecretEnv,
    Target,
    service_host,
)
from motor.deploy.plan.node_managers import compile_node_managers
from motor.deploy.plan.planner import compile_planner
from motor.protocol.specs import TlsFiles, dump_spec, spec_file_name, url_scheme

__all__ = [
    "ALL_INTERFACES",
    "CONTROLLER",
    "COORDINATOR",
    "COORDINATOR_MGMT",
    "CREDENTIALS_SECRET",
    "ENV_CONFIG_FILE",
    "ETCD_AUTH_KEYS",
    "INSTANCE_CREDENTIALS_SECRET",
    "KUBERNETES_CONFIG_DIR",
    "KUBERNETES_RUN_DIR",
    "KV_POOL",
    "LOCAL_HOST",
    "PLANNER",
    "POD_IP_REF",
    "PROBE_KINDS",
    "STANDBY_SUFFIX",
    "TOKEN_KEY",
    "TOKEN_SECRET",
    "USER_CONFIG_FILE",
    "Component",
    "ComponentKind",
    "Plan",
    "Probe",
    "ProbeKind",
    "SecretEnv",
    "Target",
    "build_plan",
    "is_secret_name",
    "required_roles",
    "service_host",
]


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
    a local config as Kubernetes objects). config_dir is where the components read `Plan.files`, their
    compiled specs (default: /etc/motor in Kubernetes, required locally); run_dir is where each component
    gets its own MOTOR_RUN_DIR (`<run_dir>/<component name>`; default /var/run/motor in Kubernetes, the parent
    of config_dir locally). python is argv[0] of the motor entry points (default: this interpreter locally,
    `python3` in the image). kept_ordinals: instance name → the ordinal it keeps (a scaled local job keeps the
    ports of the instances it keeps; see motor.config.ports).
    """
    context = plan_context(
        topology,
        target=target,
        config_dir=config_dir,
        run_dir=run_dir,
        python=python,
        kept_ordinals=kept_ordinals,
    )
    # Compiled in this order, the controller last: its registration policy lists the node managers' ports.
    kv_pool = compile_kv_pool(context)
    coordinator = compile_coordinator(context)
    planner = compile_planner(context)
    fleet = compile_node_managers(context)
    controller = compile_controller(context, registration_policy(context, fleet.role_ports))
    components, secrets = split_credentials(
        (*kv_pool, *controller, *coordinator, *planner, *fleet.components),  # start order
        kubernetes=context.kubernetes,
        etcd_auth_secret=etcd_auth_secret(topology),
    )
    user = topology.user
    deploy = user.motor_deploy_config
    return Plan(
        job_id=context.job_id,
        target=context.target,
        deploy_mode="local" if deploy.deploy_mode == "local" else deploy.kubernetes_layout,
        config_dir=context.config_dir,
        run_dir=context.run_dir,
        components=components,
        files=_spec_files((*coordinator, *planner, *fleet.components, *controller)),  # in compile order
        coordinator_url=_client_url(
            context,
            COORDINATOR,
            context.infer_tls,
            user.motor_coordinator_config.api_config.coordinator_api_infer_port,
        ),
        controller_url=_client_url(
            context,
            CONTROLLER,
            context.controller_tls,
            user.motor_controller_config.api_config.controller_api_port,
        ),
        secrets=secrets,
        mgmt_tls=context.controller_tls,
    )


def _spec_files(components: tuple[Component, ...]) -> dict[str, str]:
    """What the backend writes into config_dir: the spec of every motor component."""
    return {spec_file_name(c.name): dump_spec(c.spec) for c in components if c.spec is not None}


def _client_url(context: PlanContext, service: str, tls: TlsFiles | None, port: int) -> str:
    """Where a client outside the job reaches `service`: loopback locally, else its Service."""
    host = LOCAL_HOST if context.target == "local" else service_host(service, context.job_id)
    return f"{url_scheme(tls)}://{host}:{port}"
