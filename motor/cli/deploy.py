"""`motor deploy`, `motor status`, `motor stop`: plan the config, then run it locally or on Kubernetes.

deploy_mode local goes to the local process supervisor (motor.deploy.local); multi_deployment and
single_container go to the Kubernetes backend. `--dry-run` only writes or prints the Kubernetes manifests of
any config and touches nothing.
"""

import argparse
import importlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from motor.cli.config_args import EXIT_USAGE, add_config_arguments, config_paths, load_topology
from motor.config import Topology
from motor.deploy.plan import build_plan

# The Kubernetes modules need the `k8s` extra (pyyaml, kubernetes): imported only when used.
if TYPE_CHECKING:
    from motor.deploy.k8s.client import KubeClient
    from motor.deploy.k8s.manifests import ConfigTexts

EXIT_FAILED = 1
RUN_ROOT_ENV = "MOTOR_RUN_ROOT"
DEFAULT_RUN_ROOT = ".motor"


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    deploy = subparsers.add_parser(
        "deploy",
        help="deploy user_config.json + env.json (local processes or Kubernetes)",
        description=__doc__,
    )
    add_config_arguments(deploy)
    deploy.add_argument("--dry-run", action="store_true", help="only produce the Kubernetes manifests")
    deploy.add_argument("--output", type=Path, help="with --dry-run: directory to write the manifests into")
    update = deploy.add_mutually_exclusive_group()
    update.add_argument(
        "--update-config",
        action="store_true",
        help="re-apply only the ConfigMap; refused unless every change is whitelisted (log levels, timeouts)",
    )
    update.add_argument(
        "--update-instance-num",
        action="store_true",
        help="scale engine instances to the new counts (nothing else may change)",
    )
    deploy.add_argument(
        "--create-namespace", action="store_true", help="create the job's namespace (= job_id)"
    )
    deploy.add_argument(
        "--prometheus-operator",
        action="store_true",
        help="Kubernetes: also create a PodMonitor and a PrometheusRule (needs the prometheus-operator's CRDs)",
    )
    _add_cluster_arguments(deploy)
    deploy.set_defaults(handler=run_deploy)

    for name, handler, summary in (
        ("status", run_status, "show what runs for a job"),
        ("stop", run_stop, "stop (locally) or delete (--k8s) everything a deploy started"),
    ):
        parser = subparsers.add_parser(name, help=summary, description=summary)
        add_config_arguments(parser)
        parser.add_argument("--k8s", action="store_true", help="act on the Kubernetes deployment")
        parser.add_argument("--job-id", help="the job (default: job_id of the given config)")
        parser.add_argument("--namespace", help="with --k8s: namespace (default: the job id)")
        if name == "stop":
            parser.add_argument(
                "--delete-namespace",
                action="store_true",
                help="with --k8s: also delete the namespace if motor created it",
            )
        else:
            parser.add_argument(
                "--watch", action="store_true", help="local: redraw every --interval seconds until Ctrl-C"
            )
            parser.add_argument(
                "--interval",
                type=float,
                default=2.0,
                help="with --watch: seconds between redraws (default 2)",
            )
        _add_cluster_arguments(parser)
        parser.set_defaults(handler=handler)


def _add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig", help="kubeconfig file (default: in-cluster, $KUBECONFIG or ~/.kube/config)"
    )
    parser.add_argument(
        "--run-root",
        type=Path,
        help=f"local mode: where run directories live (default ${RUN_ROOT_ENV} or ./{DEFAULT_RUN_ROOT})",
    )


# ---- deploy -----------------------------------------------------------------------------------------------


def run_deploy(args: argparse.Namespace) -> int:
    if args.output is not None and not args.dry_run:
        print("motor: --output only goes with --dry-run", file=sys.stderr)
        return EXIT_USAGE
    topology = load_topology(args)
    if isinstance(topology, int):
        return topology
    for warning in topology.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    user_path, env_path = config_paths(args)
    from motor.deploy.k8s.manifests import ConfigTexts

    texts = ConfigTexts(user_path.read_text(encoding="utf-8"), env_path.read_text(encoding="utf-8"))
    if args.dry_run:
        return _dry_run(topology, texts, args)
    if topology.user.motor_deploy_config.deploy_mode == "local":
        if args.update_config or args.update_instance_num:
            print(
                "motor: --update-config and --update-instance-num act on Kubernetes deployments; for deploy_mode "
                "local run `motor stop` and `motor deploy` again",
                file=sys.stderr,
            )
            return EXIT_USAGE
        return _deploy_local(topology, _run_root(args))
    return _deploy_kubernetes(topology, texts, args)


def _dry_run(topology: Topology, texts: "ConfigTexts", args: argparse.Namespace) -> int:
    from motor.deploy.k8s.manifests import build_manifests
    from motor.deploy.k8s.yaml_io import dump_all, write_manifests

    plan = build_plan(topology, target="kubernetes")
    try:
        files = build_manifests(
            plan,
            topology,
            texts,
            create_namespace=args.create_namespace,
            prometheus_operator=args.prometheus_operator,
        )
    except ValueError as exc:
        print(f"motor: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.output is None:
        sys.stdout.write(dump_all([obj for manifest_file in files for obj in manifest_file.objects]))
        return 0
    written = write_manifests(files, args.output)
    count = sum(len(manifest_file.objects) for manifest_file in files)
    print(f"wrote {count} object(s) in {len(written)} file(s) to {args.output} (dry run: nothing applied)")
    for path in written:
        print(f"  {path.name}")
    return 0


def _deploy_kubernetes(topology: Topology, texts: "ConfigTexts", args: argparse.Namespace) -> int:
    from motor.deploy.k8s import backend

    job = backend.Job(
        build_plan(topology, target="kubernetes"),
        topology,
        texts,
        args.create_namespace,
        args.prometheus_operator,
    )
    if args.update_config:
        operation: Callable[..., int] = backend.update_config
    elif args.update_instance_num:
        operation = backend.scale
    else:
        operation = backend.deploy
    try:
        job.manifests()
    except ValueError as exc:
        print(f"motor: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return _with_client(args, lambda client: operation(client, job))


def _deploy_local(topology: Topology, run_root: Path) -> int:
    deploy_local = _local_backend("deploy_local")
    if deploy_local is None:
        return EXIT_FAILED
    job_dir = run_root / topology.user.motor_deploy_config.job_id
    plan = build_plan(topology, target="local", config_dir=str(job_dir / "config"), run_dir=str(job_dir))
    return int(deploy_local(plan, topology, run_root))


# ---- status / stop ----------------------------------------------------------------------------------------


def run_status(args: argparse.Namespace) -> int:
    if args.watch:
        if args.k8s:
            print(
                "motor: --watch shows local jobs; for Kubernetes use `kubectl get pods -w`", file=sys.stderr
            )
            return EXIT_USAGE
        if args.interval <= 0:
            print("motor: --interval must be > 0 seconds", file=sys.stderr)
            return EXIT_USAGE
        return _job_command(args, "watch_local", "status", interval=args.interval)
    return _job_command(args, "status_local", "status")


def run_stop(args: argparse.Namespace) -> int:
    return _job_command(args, "stop_local", "delete")


def _job_command(
    args: argparse.Namespace, local_name: str, kubernetes_name: str, **local_options: Any
) -> int:
    job_id = args.job_id
    if job_id is None and (args.config_dir or args.user_config or args.env_config):
        topology = load_topology(args)
        if isinstance(topology, int):
            return topology
        job_id = topology.user.motor_deploy_config.job_id
    if not args.k8s:
        local = _local_backend(local_name)
        if local is None:
            return EXIT_FAILED
        return int(local(_run_root(args), job_id, **local_options))
    if job_id is None:
        print("motor: --k8s needs the job: give --job-id or the config (--config-dir)", file=sys.stderr)
        return EXIT_USAGE
    from motor.deploy.k8s import backend

    namespace = args.namespace or job_id
    if kubernetes_name == "status":
        return _with_client(args, lambda client: backend.status(client, namespace, job_id))
    return _with_client(
        args, lambda client: backend.delete(client, namespace, job_id, delete_namespace=args.delete_namespace)
    )


# ---- shared -----------------------------------------------------------------------------------------------


def _run_root(args: argparse.Namespace) -> Path:
    root = args.run_root or Path(os.environ.get(RUN_ROOT_ENV) or DEFAULT_RUN_ROOT)
    return root.resolve()


def _local_backend(function: str) -> Callable[..., int] | None:
    """`function` of motor.deploy.local, which another part of motor provides; None (and a message) if absent."""
    try:
        local: ModuleType | None = importlib.import_module("motor.deploy.local")
    except ModuleNotFoundError as exc:
        if exc.name != "motor.deploy.local":
            raise
        local = None
    found = getattr(local, function, None)
    if found is None:
        print(
            f"motor: local backend not available yet (motor.deploy.local.{function} is missing)",
            file=sys.stderr,
        )
    return found


def _with_client(args: argparse.Namespace, operation: "Callable[[KubeClient], int]") -> int:
    from kubernetes.config import ConfigException

    from motor.deploy.k8s.client import KubeClient, KubeUnavailable

    try:
        client = KubeClient.from_kubeconfig(args.kubeconfig)
    except (ConfigException, OSError) as exc:
        print(f"motor: cannot load the Kubernetes configuration: {exc}", file=sys.stderr)
        return EXIT_FAILED
    try:
        return operation(client)
    except KubeUnavailable as exc:
        print(f"motor: {exc}", file=sys.stderr)
        return EXIT_FAILED
