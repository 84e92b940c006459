"""`motor deploy`, `motor status`, `motor stop`: plan the config, then run it locally or on Kubernetes.

deploy_mode local goes to the local process supervisor (motor.deploy.local); multi_deployment,
infer_service_set and single_container go to the Kubernetes backend. Without deploy_mode (pyMotor's default is
a Kubernetes deployment) motor deploys locally only when the topology fits this host and otherwise says how to
deploy it on Kubernetes. `--dry-run` only writes or prints the Kubernetes manifests of any config and touches
nothing.
"""

import argparse
import functools
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from motor.cli import local_job, local_status
from motor.cli.config_args import (
    EXIT_USAGE,
    add_config_arguments,
    config_paths,
    load_topology,
    report_problems,
)
from motor.cli.config_warnings import grouped
from motor.cli.failures import EXIT_FAILED
from motor.cli.validate import checked_engine_args, checked_tokenizer
from motor.config import ConfigError, Topology, load_documents
from motor.config.models import KUBERNETES_MODES
from motor.deploy import local
from motor.deploy.plan import Plan, Target, build_plan
from motor.protocol import env

# The Kubernetes modules need the `k8s` extra (pyyaml, kubernetes): imported only when used.
if TYPE_CHECKING:
    from motor.deploy.k8s.client import KubeClient
    from motor.deploy.k8s.manifests import ConfigTexts

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
    deploy.add_argument(
        "--include-secrets",
        action="store_true",
        help="with --dry-run: write the Secrets' values (API keys, tokens) instead of markers",
    )
    update = deploy.add_mutually_exclusive_group()
    update.add_argument(
        "--update-config",
        action="store_true",
        help="apply a config change to the running job (Kubernetes: the ConfigMap; local: restart the "
        "components whose spec changed); refused unless every change is whitelisted (log levels, timeouts)",
    )
    update.add_argument(
        "--update-instance-num",
        action="store_true",
        help="scale the running job's engine instances to the new counts (nothing else may change); "
        "removed instances are drained first",
    )
    deploy.add_argument(
        "--create-namespace", action="store_true", help="create the job's namespace (= job_id)"
    )
    deploy.add_argument(
        "--default-deploy-mode",
        choices=["local", *KUBERNETES_MODES],
        help="deploy_mode for a config that sets none (default: local when the topology fits this host, "
        "else stop and say how to deploy on Kubernetes)",
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
        help=f"local mode: where run directories live (default ${env.RUN_ROOT} or ./{DEFAULT_RUN_ROOT})",
    )


# ---- deploy -----------------------------------------------------------------------------------------------


def run_deploy(args: argparse.Namespace) -> int:
    if (args.output is not None or args.include_secrets) and not args.dry_run:
        print("motor: --output and --include-secrets only go with --dry-run", file=sys.stderr)
        return EXIT_USAGE
    topology = load_topology(args)
    if isinstance(topology, int):
        return topology
    for warning in grouped(topology.warnings):
        print(f"warning: {warning}", file=sys.stderr)
    user_path, env_path = config_paths(args)
    from motor.deploy.k8s.manifests import ConfigTexts

    texts = ConfigTexts(user_path.read_text(encoding="utf-8"), env_path.read_text(encoding="utf-8"))
    if topology.user.motor_deploy_config.deploy_mode is None:
        chosen = _choose_target(topology, texts, args)
        if isinstance(chosen, int):
            return chosen
        topology = chosen
    if args.dry_run:
        return _dry_run(topology, texts, args)
    if topology.user.motor_deploy_config.deploy_mode == "local":
        return _deploy_local(topology, _run_root(args), args)
    return _deploy_kubernetes(topology, texts, args)


def _choose_target(topology: Topology, texts: "ConfigTexts", args: argparse.Namespace) -> Topology | int:
    """No deploy_mode: --default-deploy-mode if given, the manifests for a dry run, this host when the topology
    fits it, else the way to Kubernetes. Returns the topology to deploy or an exit code."""
    local_fit, kubernetes = topology.fit("local"), topology.fit("kubernetes")
    if args.default_deploy_mode is not None:
        return _with_deploy_mode(texts, args.default_deploy_mode)
    if args.dry_run:
        if kubernetes.fits:
            return topology
        print(f"motor: cannot render Kubernetes objects: {kubernetes.describe()}", file=sys.stderr)
        return EXIT_USAGE
    if local_fit.fits:
        print("deploy_mode not set and the topology fits this host: deploying locally", file=sys.stderr)
        return _with_deploy_mode(texts, "local")
    print(
        f"motor: deploy_mode is not set and the topology does not fit this host ({local_fit.describe()}).\n"
        "  To deploy it on Kubernetes, set motor_deploy_config.deploy_mode to multi_deployment (or "
        "infer_service_set, or single_container when every instance has one pod), then run `motor deploy` "
        "again; `motor deploy --dry-run --output DIR` writes the manifests to review first."
        + ("" if kubernetes.fits else f"\n  Kubernetes needs first: {kubernetes.describe()}"),
        file=sys.stderr,
    )
    return EXIT_USAGE


def _with_deploy_mode(texts: "ConfigTexts", deploy_mode: str) -> Topology | int:
    document = json.loads(texts.user)
    document.setdefault("motor_deploy_config", {})["deploy_mode"] = deploy_mode
    try:
        return load_documents(document, json.loads(texts.env))
    except ConfigError as exc:
        print(f"motor: with deploy_mode {deploy_mode} the config is invalid:\n{exc}", file=sys.stderr)
        return EXIT_USAGE


def _dry_run(topology: Topology, texts: "ConfigTexts", args: argparse.Namespace) -> int:
    from motor.deploy.k8s.manifests import ManifestFile, build_manifests
    from motor.deploy.k8s.secrets import redact_objects
    from motor.deploy.k8s.yaml_io import dump_all, write_manifests

    plan = _plan(topology, "kubernetes")
    if isinstance(plan, int):
        return plan
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
    if not args.include_secrets:
        files = [ManifestFile(f.name, redact_objects(f.objects)) for f in files]
    if args.output is None:
        sys.stdout.write(dump_all([obj for manifest_file in files for obj in manifest_file.objects]))
        return 0
    written = write_manifests(files, args.output)
    count = sum(len(manifest_file.objects) for manifest_file in files)
    print(f"wrote {count} object(s) in {len(written)} file(s) to {args.output} (dry run: nothing applied)")
    if not args.include_secrets:
        print("  Secret values are written as markers; --include-secrets writes them")
    for path in written:
        print(f"  {path.name}")
    return 0


def _deploy_kubernetes(topology: Topology, texts: "ConfigTexts", args: argparse.Namespace) -> int:
    from motor.cli import k8s_job
    from motor.deploy.k8s import backend

    plan = _plan(topology, "kubernetes")
    if isinstance(plan, int):
        return plan
    job = backend.Job(plan, topology, texts, args.create_namespace, args.prometheus_operator)
    if args.update_config:
        operation: Callable[..., int] = k8s_job.update_config
    elif args.update_instance_num:
        operation = k8s_job.scale
    else:
        operation = k8s_job.deploy
    try:
        job.manifests()
    except ValueError as exc:
        print(f"motor: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return _with_client(args, lambda client: operation(client, job))


def _deploy_local(topology: Topology, run_root: Path, args: argparse.Namespace) -> int:
    job_dir = run_root / topology.user.motor_deploy_config.job_id
    # Engines start in their own run directories: model paths relative to here must not stay relative.
    topology = local.with_local_model_paths(topology, Path.cwd())
    if args.update_config or args.update_instance_num:
        return local_job.update(topology, run_root, scale=args.update_instance_num)
    plan = _plan(topology, "local", config_dir=str(job_dir / "config"), run_dir=str(job_dir))
    if isinstance(plan, int):
        return plan
    refused = checked_tokenizer(topology) or checked_engine_args(topology, plan)
    if refused is not None:
        return refused
    return local_job.deploy(plan, topology, run_root)


def _plan(topology: Topology, target: Target, **where: str) -> Plan | int:
    try:
        return build_plan(topology, target=target, **where)
    except ConfigError as exc:
        return report_problems(exc, f"the {target} plan of job {topology.user.motor_deploy_config.job_id}")


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
        return _job_command(args, functools.partial(local_status.watch, interval=args.interval), "status")
    return _job_command(args, local_status.status, "status")


def run_stop(args: argparse.Namespace) -> int:
    return _job_command(args, local_job.stop, "delete")


def _job_command(
    args: argparse.Namespace, local_command: Callable[[Path, str | None], int], kubernetes_name: str
) -> int:
    job_id = args.job_id
    if job_id is None and (args.config_dir or args.user_config or args.env_config):
        topology = load_topology(args)
        if isinstance(topology, int):
            return topology
        job_id = topology.user.motor_deploy_config.job_id
    if not args.k8s:
        return local_command(_run_root(args), job_id)
    if job_id is None:
        print("motor: --k8s needs the job: give --job-id or the config (--config-dir)", file=sys.stderr)
        return EXIT_USAGE
    from motor.cli import k8s_job

    namespace = args.namespace or job_id
    if kubernetes_name == "status":
        return _with_client(args, lambda client: k8s_job.status(client, namespace, job_id))
    return _with_client(
        args, lambda client: k8s_job.delete(client, namespace, job_id, delete_namespace=args.delete_namespace)
    )


# ---- shared -----------------------------------------------------------------------------------------------


def _run_root(args: argparse.Namespace) -> Path:
    root = args.run_root or Path(os.environ.get(env.RUN_ROOT) or DEFAULT_RUN_ROOT)
    return root.resolve()


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
