"""`python -m motor.coordinator --spec FILE`: the OpenAI-compatible entry point (the CoordinatorSpec the
deployment plan wrote)."""

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

import uvloop

from motor.coordinator.settings import CoordinatorSettings
from motor.protocol.specs import CoordinatorSpec, SpecError, StandbySpec, load_spec
from motor.runtime.standby import run_with_standby

log = logging.getLogger("motor.coordinator")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m motor.coordinator", description=__doc__)
    parser.add_argument("--spec", required=True, type=Path, help="the coordinator's spec file")
    return parser


async def _run(settings: CoordinatorSettings, standby: StandbySpec | None, name: str) -> int:
    """Serve until SIGTERM/SIGINT; with a standby spec, only while this process holds the leader lock."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    if standby is None:
        await _serve(settings, stop)
        return 0
    return await run_with_standby(
        standby, settings.bind_host, name, lambda until: _serve(settings, until), stop
    )


async def _serve(settings: CoordinatorSettings, stop: asyncio.Event) -> None:
    if settings.config.inference_workers_config.num_workers == 1:
        from motor.coordinator.process.single import run_single_process

        await run_single_process(settings, stop)
    else:
        from motor.coordinator.process.worker_supervisor import run_supervisor

        await run_supervisor(settings, stop)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        spec = load_spec(args.spec, CoordinatorSpec)
    except SpecError as exc:
        print(f"motor coordinator: {exc}", file=sys.stderr)
        return 2
    settings = CoordinatorSettings.from_spec(spec, args.spec.resolve())
    logging.basicConfig(
        level=settings.config.logging_config.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return uvloop.run(_run(settings, spec.standby, spec.name))
    except (OSError, ValueError) as exc:
        print(f"motor coordinator: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
