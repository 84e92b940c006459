"""`motor validate`: check the whole topology, compile the plan, check a local plan's engine commands with the
installed engines' own argument parsers, and show what motor would deploy (`--explain`: every component's
compiled spec as well)."""

import argparse
import os
import shlex
import sys
from pathlib import Path

from motor.cli.config_args import add_config_arguments, load_topology, report_problems
from motor.cli.config_warnings import grouped
from motor.cli.engine_args import check_engine_args
from motor.cli.tokenizer_check import check_tokenizer
from motor.config import ConfigError, ConfigIssue, Topology
from motor.deploy.plan import Plan, build_plan
from motor.kv.pool import engine_store_config, master_args
from motor.protocol import env

DEFAULT_RUN_ROOT = ".motor"


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = subparsers.add_parser(
        "validate",
        help="validate user_config.json + env.json and summarise the topology",
        description=__doc__,
    )
    add_config_arguments(parser)
    parser.add_argument(
        "--explain", action="store_true", help="also print the spec every component would start from"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    topology = load_topology(args)
    if isinstance(topology, int):
        return topology
    try:
        plan = compile_plan(topology)
    except ConfigError as exc:
        return report_problems(exc, f"the plan of job {topology.user.motor_deploy_config.job_id}")
    if topology.user.motor_deploy_config.deploy_mode == "local":
        refused = checked_tokenizer(topology) or checked_engine_args(topology, plan)
        if refused is not None:
            return refused
    print(summary(topology))
    if args.explain:
        print(explain(plan))
    return 0


def checked_engine_args(topology: Topology, plan: Plan) -> int | None:
    """The engines installed here parse the commands the plan gives them: None when they take them (notes go
    to stderr), else the exit code after reporting each refused key."""
    print("checking the engine commands with the installed engines' own argument parsers", file=sys.stderr)
    checked = check_engine_args(topology, plan)
    return _reported(checked.issues, checked.notes, topology, "the engine commands")


def checked_tokenizer(topology: Topology) -> int | None:
    """A local kv_cache_affinity job's coordinator finds the engines' tokenizer here: None when it does (notes
    go to stderr), else the exit code after reporting where it does not."""
    checked = check_tokenizer(topology)
    return _reported(checked.issues, checked.notes, topology, "the coordinator's tokenizer")


def _reported(issues: list[ConfigIssue], notes: list[str], topology: Topology, what: str) -> int | None:
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if issues:
        return report_problems(
            ConfigError(issues), f"{what} of job {topology.user.motor_deploy_config.job_id}"
        )
    return None


def compile_plan(topology: Topology) -> Plan:
    """The plan `motor deploy` would build: local ones under the default run root, else for Kubernetes."""
    deploy = topology.user.motor_deploy_config
    if deploy.deploy_mode != "local":
        return build_plan(topology, target="kubernetes")
    job_dir = Path(os.environ.get(env.RUN_ROOT) or DEFAULT_RUN_ROOT).resolve() / deploy.job_id
    return build_plan(topology, target="local", config_dir=str(job_dir / "config"), run_dir=str(job_dir))


def explain(plan: Plan) -> str:
    lines = [f"plan for {plan.target}: {len(plan.components)} component(s), specs in {plan.config_dir}"]
    for component in plan.components:
        lines.append(f"--- {component.name} ({component.kind}): {shlex.join(component.argv)}")
        if component.spec is not None:
            lines.append(plan.files[f"{component.name}.spec.json"].rstrip())
    return "\n".join(lines)


def summary(topology: Topology) -> str:
    deploy = topology.user.motor_deploy_config
    mode = deploy.deploy_mode or "not set (pyMotor's default: infer_service_set, a Kubernetes deployment)"
    lines = [f"valid: job {deploy.job_id}, deploy_mode {mode}, hardware {deploy.hardware_type}"]
    if deploy.deploy_mode is None:
        lines.append("targets: " + "; ".join(fit.describe() for fit in topology.targets))
    for spec in topology.roles.values():
        lines.append(
            f"  {spec.role}: {spec.instances} instance(s) x {spec.pods_per_instance} pod(s), "
            f"{spec.accelerators_per_pod} accelerator(s)/pod, engine {spec.engine_type}"
        )
    profile = topology.profile
    lines.append(
        f"dispatch profile: {profile.profile.value} (decided by {profile.decided_by}: {profile.why})"
    )
    if topology.pool is None:
        lines.append("KV pool: off")
    else:
        pool = topology.pool
        lines.append(f"KV pool: on (port {pool.port}, lease {pool.default_kv_lease_ttl} ms)")
        host = "127.0.0.1" if deploy.deploy_mode == "local" else "0.0.0.0"
        lines.append("  master: mooncake_master " + shlex.join(master_args(pool, bind_host=host)))
        store = engine_store_config(pool, master_host="<pool host>")
        lines.append("  engine store config: " + ", ".join(f"{key}={value}" for key, value in store.items()))
    if topology.ports:
        lines.append("ports:")
        lines.extend(f"  {use.port:>5}  {use.component}" for use in topology.ports)
    lines.extend(f"warning: {warning}" for warning in grouped(topology.warnings))
    return "\n".join(lines)
