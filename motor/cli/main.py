"""The `motor` command: one subcommand module per job, each exposing `register(subparsers)`."""

import argparse
import importlib
import sys

SUBCOMMAND_MODULES = [
    "motor.cli.validate",
    "motor.cli.deploy",
    "motor.cli.patch",
    "motor.cli.model",
    "motor.cli.observe",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="motor",
        description="Deploy and run PD-disaggregated LLM serving with a KV-cache pool from user_config.json + env.json",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_name in SUBCOMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except BrokenPipeError:
        sys.stderr.close()
        return 1


if __name__ == "__main__":
    sys.exit(main())
