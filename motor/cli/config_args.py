"""Command-line options that name the config pair, shared by every subcommand that reads it."""

import argparse
import sys
from pathlib import Path

from motor.config import ConfigError, ConfigPathError, Topology, load_config, resolve_config_paths

EXIT_USAGE = 2
EXIT_INVALID = 2


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config-dir", help="directory holding user_config.json and env.json")
    parser.add_argument("--user-config", "--config", dest="user_config", help="path of user_config.json")
    parser.add_argument("--env-config", "--env", dest="env_config", help="path of env.json")


def config_paths(args: argparse.Namespace) -> tuple[Path, Path]:
    return resolve_config_paths(args.config_dir, args.user_config, args.env_config)


def load_topology(args: argparse.Namespace) -> Topology | int:
    """The validated topology, or an exit code after printing what is wrong (one line per problem)."""
    try:
        user_path, env_path = config_paths(args)
    except ConfigPathError as exc:
        print(f"motor: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return load_config(user_path, env_path)
    except ConfigError as exc:
        return report_problems(exc, f"{user_path} / {env_path}")


def report_problems(error: ConfigError, where: str) -> int:
    """Print every problem of `error`, one per line; the exit code for an invalid config."""
    print(f"motor: {len(error.issues)} problem(s) in {where}:", file=sys.stderr)
    for issue in error.issues:
        print(f"  {issue}", file=sys.stderr)
    return EXIT_INVALID
