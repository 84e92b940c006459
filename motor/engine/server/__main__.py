import argparse
import asyncio
import logging
import sys

from motor.engine.server.app import ServerOptions, serve
from motor.runtime.processes import ENGINE_GRACE_S


def parse_options(argv: list[str]) -> ServerOptions:
    if "--" in argv:
        split = argv.index("--")
        own, command = argv[:split], argv[split + 1 :]
    else:
        own, command = argv, []
    parser = argparse.ArgumentParser(
        prog="python -m motor.engine.server",
        description="Run an engine as a child process and serve GET /status for it.",
        usage="%(prog)s [options] -- ENGINE COMMAND...",
        allow_abbrev=False,
    )
    parser.add_argument("--engine-host", default="127.0.0.1", help="where the engine's /health answers")
    parser.add_argument("--engine-port", type=int, required=True)
    parser.add_argument("--status-host", default="127.0.0.1")
    parser.add_argument("--status-port", type=int, required=True)
    parser.add_argument("--probe-interval", type=float, default=1.0, help="seconds between /health probes")
    parser.add_argument("--probe-timeout", type=float, default=2.0, help="seconds one /health probe may take")
    parser.add_argument(
        "--failure-threshold",
        type=int,
        default=3,
        help="failed probes in a row that make a healthy engine abnormal",
    )
    parser.add_argument(
        "--startup-timeout",
        type=float,
        default=600.0,
        help="seconds after which a never-healthy engine is abnormal",
    )
    parser.add_argument(
        "--stop-timeout", type=float, default=ENGINE_GRACE_S, help="seconds from SIGTERM to SIGKILL"
    )
    parser.add_argument(
        "--no-patches",
        action="store_true",
        help="do not put motor's gated runtime patches on the engine's path",
    )
    args = parser.parse_args(own)
    if not command:
        parser.error(
            "the engine command is missing: append `-- python -m vllm.entrypoints.openai.api_server ...`"
        )
    return ServerOptions(
        engine_host=args.engine_host,
        engine_port=args.engine_port,
        status_host=args.status_host,
        status_port=args.status_port,
        command=command,
        probe_interval_s=args.probe_interval,
        probe_timeout_s=args.probe_timeout,
        failure_threshold=args.failure_threshold,
        startup_timeout_s=args.startup_timeout,
        stop_timeout_s=args.stop_timeout,
        apply_patches=not args.no_patches,
    )


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return asyncio.run(serve(parse_options(sys.argv[1:])))


if __name__ == "__main__":
    sys.exit(main())
