"""`motor validate`: check the whole topology and show what motor would deploy."""

import argparse
import shlex

from motor.cli.config_args import add_config_arguments, load_topology
from motor.config import Topology
from motor.kv.pool import engine_store_config, master_args


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = subparsers.add_parser(
        "validate",
        help="validate user_config.json + env.json and summarise the topology",
        description=__doc__,
    )
    add_config_arguments(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    topology = load_topology(args)
    if isinstance(topology, int):
        return topology
    print(summary(topology))
    return 0


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
    for warning in topology.warnings:
        lines.append(f"warning: {warning}")
    return "\n".join(lines)
