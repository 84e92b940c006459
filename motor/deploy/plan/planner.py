"""The SLO planner (`kind="planner"`), when motor_planner_config enables it: its bounds resolved once, where it
reads the instances and figures (the controller, the coordinator's management port) and the scale path it acts
through (the local job's run directory, or the Kubernetes namespace)."""

from motor.config.planner import instance_accelerators, planner_bounds
from motor.deploy.plan.context import PlanContext
from motor.deploy.plan.model import PLANNER, Component, probes
from motor.protocol.specs import PlannerSpec, url_scheme


def compile_planner(context: PlanContext) -> tuple[Component, ...]:
    topology = context.topology
    planner = topology.user.motor_planner_config
    if not planner.enable:
        return ()
    port = planner.api_config.planner_api_port
    return (
        Component(
            name=PLANNER,
            kind="planner",
            argv=context.motor_argv(PLANNER, "planner"),
            env=context.env(topology.env.motor_common_env, {}, context.component_run_dir(PLANNER)),
            ports={"api": port},
            probes=probes("api", scheme=url_scheme(context.controller_tls)),
            spec=PlannerSpec(
                **context.base_spec(PLANNER, planner.logging_config.log_level),  # type: ignore[arg-type]
                port=port,
                config=planner,
                bounds=planner_bounds(planner, instance_accelerators(topology.user)),
                controller_url=context.controller_url,
                coordinator_mgmt_url=context.coordinator_mgmt_url,
                token=context.token,
                mgmt_tls=context.controller_tls,
                backend=context.target,
                job_dir=context.run_dir if context.target == "local" else None,
                namespace=context.job_id if context.kubernetes else None,
            ),
        ),
    )
