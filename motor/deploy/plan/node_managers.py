"""One node manager per engine instance (`kind="node_manager"`, named like "prefill-0"), each with the compiled
command of its engine, and the ports of every role that the controller's registration policy lists."""

from dataclasses import dataclass

from motor.config.errors import ConfigError, ConfigIssue
from motor.config.kv_events import KV_EVENTS_ROLES, kv_events_enabled
from motor.config.ports import InstancePorts
from motor.config.tls import node_manager_key
from motor.config.topology import Role
from motor.deploy.engines import EngineLaunchRequest, LaunchError, engine_spec, served_model_name
from motor.deploy.engines.kv_events import local_placement, pod_placement
from motor.deploy.plan.context import PlanContext, tls_files
from motor.deploy.plan.credentials import INSTANCE_CREDENTIALS_SECRET
from motor.deploy.plan.model import Component, SecretEnv, probes
from motor.protocol.credentials import instance_credential_env, is_motor_credential
from motor.protocol.credentials import is_credential_env as is_secret_name
from motor.protocol.specs import EngineSpec, NodeManagerSpec, RolePorts, SecretRef, url_scheme

KV_EVENTS_PORT = 5557  # pyMotor's publisher port
KV_REPLAY_PORT = 5558


@dataclass(frozen=True)
class Fleet:
    components: tuple[Component, ...]  # in the order of `PlanContext.instances`
    role_ports: dict[Role, RolePorts]  # each role's configured ports, as registrations must show them


def compile_node_managers(context: PlanContext) -> Fleet:
    """Raise ConfigError naming every engine section that cannot be turned into a command line."""
    problems: dict[str, ConfigIssue] = {}
    components: list[Component] = []
    role_ports: dict[Role, RolePorts] = {}
    for ports in context.instances:
        try:
            component, engine = _node_manager(context, ports)
        except LaunchError as exc:
            problems.setdefault(str(exc), ConfigIssue(exc.path, exc.message))
            continue
        components.append(component)
        if ports.role not in role_ports:  # the role's first instance
            role_ports[ports.role] = _role_ports(context, ports, engine)  # type: ignore[index]
    if problems:
        raise ConfigError(list(problems.values()))
    return Fleet(tuple(components), role_ports)


def _node_manager(context: PlanContext, ports: InstancePorts) -> tuple[Component, EngineSpec]:
    """The instance's node manager and the engine it runs."""
    role_spec = context.topology.roles[ports.role]  # type: ignore[index]
    if context.shared_pod:
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
    run_dir = context.component_run_dir(ports.name)
    tls = tls_files(context.topology.tls.mgmt_of(node_manager_key(role_spec.role)))
    placement = None
    if kv_events_enabled(context.topology.user) and role_spec.role in KV_EVENTS_ROLES:
        placement = (
            pod_placement(context.spec_host, KV_EVENTS_PORT, KV_REPLAY_PORT)
            if context.kubernetes and not context.shared_pod
            else local_placement(run_dir)
        )
    request = EngineLaunchRequest(
        role_spec,
        instance_id=ports.name,
        host=context.spec_host,
        port=engine_port,
        status_port=status_port,
        run_dir=run_dir,
        store_config=context.store_config,
        python=context.python,
        bootstrap_port=bootstrap_port,
        store_lookup_ordinal=ordinal,
        kv_events=placement,
        otlp_traces_endpoint=context.topology.user.motor_coordinator_config.tracer_config.endpoint,
    )
    engine = _without_secret_values(engine_spec(request))
    credential = SecretRef(env=instance_credential_env(ports.name))
    instance_secret = (
        (SecretEnv(credential.env, INSTANCE_CREDENTIALS_SECRET, ports.name),) if context.kubernetes else ()
    )
    component = Component(
        name=ports.name,
        kind="node_manager",
        argv=context.motor_argv(ports.name, "node_manager"),
        env=context.env(role_spec.env, {}, run_dir),
        secret_env=instance_secret,
        ports={
            "nm": nm_port,
            "engine": engine_port,
            "engine-status": status_port,
            **(
                {"kv-events": KV_EVENTS_PORT, "kv-replay": KV_REPLAY_PORT}
                if placement and placement.connect.startswith("tcp")
                else {}
            ),
        },
        probes=probes("nm", scheme=url_scheme(tls)),
        replicas=role_spec.pods_per_instance,
        accelerators=role_spec.accelerators_per_pod,
        role=role_spec.role,
        index=ports.index,
        ordinal=ordinal if context.shared_pod else None,
        spec=NodeManagerSpec(
            **context.base_spec(ports.name, role_spec.node_manager.logging_config.log_level),  # type: ignore[arg-type]
            instance_id=ports.name,
            role=role_spec.role,
            model_name=served_model_name(role_spec),
            port=nm_port,
            controller_url=context.controller_url,
            credential=credential,
            heartbeat_interval=role_spec.node_manager.basic_config.heartbeat_interval_seconds,
            engine=engine,
            mgmt_tls=tls,
        ),
    )
    return component, engine


def _without_secret_values(engine: EngineSpec) -> EngineSpec:
    """The engine's credentials by name only: the node manager passes on what env.json gave it under that name,
    except motor's own credentials, which never reach an engine."""
    return engine.model_copy(
        update={
            "env": {name: value for name, value in engine.env.items() if not is_secret_name(name)},
            "secret_env": [
                SecretRef(env=name)
                for name in engine.env
                if is_secret_name(name) and not is_motor_credential(name)
            ],
        }
    )


def _role_ports(context: PlanContext, ports: InstancePorts, engine: EngineSpec) -> RolePorts:
    """The role's configured ports, from its first instance; on a shared host instance i serves on the role's
    bootstrap port + i."""
    role_spec = context.topology.roles[ports.role]  # type: ignore[index]
    bootstrap = engine.bootstrap_port
    if bootstrap is not None and context.shared_pod:
        bootstrap -= ports.index
    return RolePorts(
        node_manager_port=role_spec.node_manager.api_config.node_manager_port,
        engine_port=role_spec.node_manager.endpoint_config.base_port,
        bootstrap_port=bootstrap,
    )
