#!/usr/bin/env python3
"""pyMotor-compatible deployer entry: the seed's flags, translated to `motor deploy`.

    python examples/deployer/deploy.py --config_dir ../infer_engines/vllm [--dry-run] [--update_config]
    python examples/deployer/deploy.py --user_config_path U --env_config_path E   (short: --config U --env E)

Runs from any directory; behaves as `motor deploy` (same handler, same exit codes) with pyMotor's defaults:
a config without deploy_mode is deployed as infer_service_set (on Kubernetes) and --dry-run writes to
./output_yamls.
"""

import argparse
import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("motor") is None:  # running from a checkout without `pip install`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from motor.cli.main import main as motor_main

EXIT_USAGE = 2
PYMOTOR_DEFAULT_DEPLOY_MODE = "infer_service_set"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config_dir", "--dir", help="directory holding user_config.json and env.json")
    parser.add_argument("--user_config_path", "--config", help="user_config.json (needs --env_config_path)")
    parser.add_argument("--env_config_path", "--env", help="env.json (needs --user_config_path)")
    update = parser.add_mutually_exclusive_group()
    update.add_argument("--update_config", action="store_true", help="refresh only whitelisted config fields")
    update.add_argument("--update_instance_num", action="store_true", help="scale engine instances")
    parser.add_argument(
        "--dry-run", "--dry_run", dest="dry_run", action="store_true", help="only write manifests"
    )
    parser.add_argument(
        "--output", help="with --dry-run: directory for the manifests (default ./output_yamls)"
    )
    parser.add_argument("--kubeconfig", help="kubeconfig file")
    parser.add_argument(
        "--create_namespace", "--create-namespace", action="store_true", help="create the namespace"
    )
    return parser.parse_args(argv)


def motor_arguments(args: argparse.Namespace) -> list[str] | str:
    """The equivalent `motor deploy` arguments, or a usage error message."""
    if (args.user_config_path is None) != (args.env_config_path is None):
        return "Both --config and --env must be specified together, or use --config_dir"
    if args.user_config_path is None and args.config_dir is None:
        return "Missing required configuration. Use --config_dir or both --config and --env."
    argv = ["deploy", "--default-deploy-mode", PYMOTOR_DEFAULT_DEPLOY_MODE]
    if args.user_config_path is not None:
        argv += ["--user-config", args.user_config_path, "--env-config", args.env_config_path]
    else:
        argv += ["--config-dir", args.config_dir]
    if args.dry_run:
        argv += ["--dry-run", "--output", args.output or "output_yamls"]
    elif args.output is not None:
        return "--output only goes with --dry-run"
    for flag, enabled in (
        ("--update-config", args.update_config),
        ("--update-instance-num", args.update_instance_num),
        ("--create-namespace", args.create_namespace),
    ):
        if enabled:
            argv.append(flag)
    if args.kubeconfig:
        argv += ["--kubeconfig", args.kubeconfig]
    return argv


def main(argv: list[str] | None = None) -> int:
    translated = motor_arguments(parse_args(argv))
    if isinstance(translated, str):
        print(f"deploy.py: {translated}", file=sys.stderr)
        return EXIT_USAGE
    return motor_main(translated)


if __name__ == "__main__":
    sys.exit(main())
