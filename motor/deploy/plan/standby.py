"""`standby_config.enable_master_standby`: the controller (coordinator) runs as a pair that elects its leader in
etcd, each process answering its probes on its own `probe` port (readiness 503 while standby)."""

import dataclasses

from motor.config.models import StandbyConfig
from motor.deploy.plan.context import PlanContext
from motor.deploy.plan.model import STANDBY_SUFFIX, Component, probes
from motor.protocol import env as env_names
from motor.protocol.specs import EtcdSpec, StandbySpec


def standby_spec(
    standby: StandbyConfig, etcd: EtcdSpec, key_prefix: str, probe_port: int
) -> StandbySpec | None:
    if not standby.enable_master_standby:
        return None
    return StandbySpec(
        lock_key=key_prefix + standby.master_lock_key,
        lease_ttl=standby.master_lock_ttl,
        refresh_interval=standby.master_standby_check_interval,
        retry_interval=standby.master_lock_retry_interval,
        max_failures=standby.master_lock_max_failures,
        probe_port=probe_port,
        etcd=etcd,
    )


def with_standby(
    context: PlanContext, component: Component, standby: StandbySpec | None
) -> tuple[Component, ...]:
    """The component, or the pair that elects its leader: on Kubernetes one Deployment of 2 replicas, locally a
    second component on probe_port + 1 whose serving ports are the first one's (bound by the leader only)."""
    if standby is None:
        return (component,)
    spec = component.spec
    assert spec is not None
    leader = dataclasses.replace(
        component,
        ports={**component.ports, "probe": standby.probe_port},
        probes=probes("probe"),
        spec=spec.model_copy(update={"standby": standby}),
        replicas=2 if context.kubernetes else component.replicas,
    )
    if context.kubernetes:
        return (leader,)
    name = component.name + STANDBY_SUFFIX
    run_dir = context.component_run_dir(name)
    second = standby.model_copy(update={"probe_port": standby.probe_port + 1})
    return (
        leader,
        dataclasses.replace(
            leader,
            name=name,
            argv=context.motor_argv(name, component.kind),
            env={**component.env, env_names.RUN_DIR: run_dir},
            ports={**component.ports, "probe": second.probe_port},
            spec=spec.model_copy(update={"name": name, "run_dir": run_dir, "standby": second}),
            standby_for=component.name,
        ),
    )
