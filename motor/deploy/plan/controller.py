"""The controller (`kind="controller"`), or its standby pair, with the registration policy its API enforces."""

from motor.config.ports import controller_probe_port
from motor.config.topology import Role, Topology
from motor.deploy.plan.context import PlanContext, tls_files
from motor.deploy.plan.model import CONTROLLER, Component, probes
from motor.deploy.plan.standby import standby_spec, with_standby
from motor.protocol import env as env_names
from motor.protocol.specs import (
    ControllerSpec,
    EtcdSpec,
    RegistrationPolicy,
    RolePorts,
    SecretRef,
    url_scheme,
)

# Where registrations may point: loopback locally; on Kubernetes the pod networks (`pod_networks`), by default
# the private ranges, which keeps out loopback, link-local (cloud metadata) and public addresses.
LOOPBACK_NETWORKS = ("127.0.0.0/8", "::1/128")
PRIVATE_NETWORKS = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7")
# Ordinals on a shared host stay below twice the instance count (motor.config.ports), at most 3 roles x 16.
SHARED_HOST_ORDINALS = 2 * 3 * 16


def compile_controller(context: PlanContext, registration: RegistrationPolicy) -> tuple[Component, ...]:
    topology = context.topology
    controller = topology.user.motor_controller_config
    api, instance = controller.api_config, controller.instance_config
    persisted = controller.etcd_config.enable_etcd_persistence
    component = Component(
        name=CONTROLLER,
        kind="controller",
        argv=context.motor_argv(CONTROLLER, "controller"),
        env=context.env(
            topology.env.motor_common_env,
            topology.env.motor_controller_env,
            context.component_run_dir(CONTROLLER),
        ),
        ports={"api": api.controller_api_port},
        probes=probes("api", scheme=url_scheme(context.controller_tls)),
        spec=ControllerSpec(
            **context.base_spec(CONTROLLER, controller.logging_config.log_level),  # type: ignore[arg-type]
            port=api.controller_api_port,
            token=context.token,
            coordinator_urls=[context.coordinator_mgmt_url],
            heartbeat_timeout=instance.instance_heartbeat_timeout,
            expired_timeout=instance.instance_expired_timeout,
            check_interval=instance.instance_manager_check_interval,
            reconcile_interval=controller.event_config.coordinator_heartbeat_interval,
            registration=registration,
            etcd=etcd_spec(topology) if persisted else None,
            mgmt_tls=context.controller_tls,
        ),
    )
    standby = standby_spec(
        controller.standby_config,
        etcd_spec(topology),
        f"/motor/{context.job_id}/{CONTROLLER}",
        controller_probe_port(topology.user),
    )
    return with_standby(context, component, standby)


def registration_policy(context: PlanContext, role_ports: dict[Role, RolePorts]) -> RegistrationPolicy:
    """What the controller accepts in a registration: addresses in these networks, each role's ports."""
    pod_networks = context.topology.user.motor_deploy_config.pod_networks
    return RegistrationPolicy(
        networks=list(LOOPBACK_NETWORKS if context.target == "local" else pod_networks or PRIVATE_NETWORKS),
        scheme=url_scheme(context.controller_tls),
        roles=role_ports,
        shared_host=context.shared_pod,
        ordinals=SHARED_HOST_ORDINALS,
    )


def etcd_auth_secret(topology: Topology) -> str | None:
    """The Kubernetes Secret holding the controller's etcd credentials, when it persists to etcd and names one."""
    etcd = topology.user.motor_controller_config.etcd_config
    return etcd.etcd_auth_secret if etcd.enable_etcd_persistence else None


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
