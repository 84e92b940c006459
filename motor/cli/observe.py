"""`motor prometheus-config`, `motor dashboard`, `motor logs`: see and collect what a deployment exports.

- `motor prometheus-config --job-id ID` prints the prometheus.yml `motor deploy` wrote into the running local
  job's run directory (next to its file_sd targets and rules); `--config-dir DIR` prints one for a config,
  with the targets inline; `--output DIR` writes prometheus.yml, targets.json and rules.yml there instead;
  `--k8s` prints the prometheus-operator PodMonitor and PrometheusRule of the Kubernetes plan.
- `motor dashboard [--output FILE]` prints (or writes) motor's Grafana dashboard JSON.
- `motor logs COMPONENT [-f] [-n N] [--engine]` shows a local job's component log (or its engine's).
"""

import argparse
import sys
from pathlib import Path

import yaml

from motor.cli.config_args import EXIT_USAGE, add_config_arguments, config_paths, load_topology
from motor.cli.deploy import _run_root as run_root  # one definition of the run root for every subcommand
from motor.config import ConfigError, load_config
from motor.deploy.local.state import job_dir
from motor.deploy.plan import build_plan
from motor.deploy.prometheus import CONFIG_FILE, PROMETHEUS_DIR, prometheus_config, prometheus_files

EXIT_FAILED = 1


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    config = subparsers.add_parser(
        "prometheus-config",
        help="the Prometheus scrape config of a job (local targets, or the prometheus-operator objects)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_arguments(config)
    config.add_argument("--job-id", help="a running local job (default: the config's, when one is given)")
    _add_run_root(config)
    config.add_argument(
        "--output", type=Path, help="write prometheus.yml, targets.json and rules.yml into this directory"
    )
    config.add_argument(
        "--k8s", action="store_true", help="print the PodMonitor and PrometheusRule of the Kubernetes plan"
    )
    config.set_defaults(handler=run_prometheus_config)

    dashboard = subparsers.add_parser(
        "dashboard", help="motor's Grafana dashboard (JSON)", description="Needs the `observability` extra."
    )
    dashboard.add_argument("--output", type=Path, help="file to write (default: print it)")
    dashboard.set_defaults(handler=run_dashboard)

    logs = subparsers.add_parser("logs", help="a local job's component log", description=__doc__)
    logs.add_argument(
        "component", metavar="COMPONENT", help="e.g. coordinator, controller, kv-pool, prefill-0"
    )
    logs.add_argument(
        "-f", "--follow", action="store_true", help="keep printing what is appended (Ctrl-C ends)"
    )
    logs.add_argument("-n", "--lines", type=int, default=50, help="last lines to show first (default 50)")
    logs.add_argument("--engine", action="store_true", help="the engine's log of a node manager instance")
    logs.add_argument("--job-id", help="the job (default: the only local job)")
    _add_run_root(logs)
    logs.set_defaults(handler=run_logs)


def _add_run_root(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--run-root", type=Path, help="where run directories live (default $MOTOR_RUN_ROOT or ./.motor)"
    )


def run_prometheus_config(args: argparse.Namespace) -> int:
    if args.config_dir or args.user_config or args.env_config:
        topology = load_topology(args)
        if isinstance(topology, int):
            return topology
        job_id = args.job_id or topology.user.motor_deploy_config.job_id
        user_path, env_path = config_paths(args)
    elif args.job_id is not None:
        job_id = args.job_id
        config_dir = job_dir(run_root(args), job_id) / "config"
        if not config_dir.is_dir():
            print(
                f"motor: no local job {job_id!r} under {run_root(args)}; deploy it or give --config-dir",
                file=sys.stderr,
            )
            return EXIT_FAILED
        written = job_dir(run_root(args), job_id) / PROMETHEUS_DIR / CONFIG_FILE
        if not args.output and not args.k8s and written.is_file():
            sys.stdout.write(written.read_text(encoding="utf-8"))
            return 0
        user_path, env_path = config_dir / "user_config.json", config_dir / "env.json"
        try:
            topology = load_config(user_path, env_path)
        except ConfigError as exc:
            print(f"motor: the job's config copy in {config_dir} does not validate: {exc}", file=sys.stderr)
            return EXIT_FAILED
    else:
        print("motor: give --job-id (a running local job) or the config (--config-dir)", file=sys.stderr)
        return EXIT_USAGE

    if args.k8s:
        from motor.deploy.k8s.manifests import ConfigTexts, build_manifests

        texts = ConfigTexts(user_path.read_text(encoding="utf-8"), env_path.read_text(encoding="utf-8"))
        plan = build_plan(topology, target="kubernetes")
        files = build_manifests(plan, topology, texts, prometheus_operator=True)
        objects = [
            o for f in files for o in f.objects if o["apiVersion"].startswith("monitoring.coreos.com/")
        ]
        sys.stdout.write(yaml.safe_dump_all(objects, sort_keys=False))
        return 0
    directory = job_dir(run_root(args), job_id)
    plan = build_plan(topology, target="local", config_dir=str(directory / "config"), run_dir=str(directory))
    if args.output is None:
        sys.stdout.write(yaml.safe_dump(prometheus_config(plan), sort_keys=False))
        return 0
    args.output.mkdir(parents=True, exist_ok=True)
    for name, text in prometheus_files(plan, topology.pool, str(args.output.resolve())).items():
        (args.output / name).write_text(text, encoding="utf-8")
    print(
        f"wrote {CONFIG_FILE} and its targets and rules to {args.output}: prometheus --config.file={args.output / CONFIG_FILE}"
    )
    return 0


def run_dashboard(args: argparse.Namespace) -> int:
    try:
        from motor.observability.dashboard import write_dashboard
    except ImportError as exc:
        print(
            f"motor dashboard: {exc}; install the observability extra (pip install -e '.[observability]')",
            file=sys.stderr,
        )
        return EXIT_FAILED
    return write_dashboard(args.output or Path("-"))


def run_logs(args: argparse.Namespace) -> int:
    from motor.cli import local_job

    return local_job.logs(
        run_root(args), args.job_id, args.component, lines=args.lines, follow=args.follow, engine=args.engine
    )
