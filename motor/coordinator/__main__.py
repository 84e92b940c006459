"""`python -m motor.coordinator --user-config U --env-config E`: the OpenAI-compatible entry point."""

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

import uvloop

from motor.config import ConfigError, load_config
from motor.coordinator.dispatch.profiles import required_roles
from motor.coordinator.settings import CoordinatorSettings

log = logging.getLogger("motor.coordinator")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m motor.coordinator", description=__doc__)
    parser.add_argument("--user-config", required=True, type=Path, help="path of user_config.json")
    parser.add_argument("--env-config", required=True, type=Path, help="path of env.json")
    return parser


async def _run(settings: CoordinatorSettings, roles: list[str], user_config: Path, env_config: Path) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    if settings.config.inference_workers_config.num_workers == 1:
        from motor.coordinator.process import run_single_process

        await run_single_process(settings, roles, stop)
    else:
        from motor.coordinator.supervisor import run_supervisor

        await run_supervisor(settings, roles, stop, user_config, env_config)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        topology = load_config(args.user_config, args.env_config)
    except ConfigError as exc:
        print(
            f"motor coordinator: {len(exc.issues)} problem(s) in {args.user_config} / {args.env_config}:",
            file=sys.stderr,
        )
        for issue in exc.issues:
            print(f"  {issue}", file=sys.stderr)
        return 2
    settings = CoordinatorSettings.from_topology(topology)
    logging.basicConfig(
        level=settings.config.logging_config.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for warning in topology.warnings:
        log.warning("%s", warning)
    roles = required_roles(settings.profile, set(topology.roles))
    try:
        uvloop.run(_run(settings, roles, args.user_config.resolve(), args.env_config.resolve()))
    except (OSError, ValueError) as exc:
        print(f"motor coordinator: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
