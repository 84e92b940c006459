"""`python -m motor.node_manager --spec FILE` (the NodeManagerSpec the deployment plan wrote)."""

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

import aiohttp
from aiohttp import web

from motor.node_manager.app import build_app
from motor.node_manager.service import NodeManager
from motor.node_manager.settings import NodeSettings, SettingsError, node_settings
from motor.protocol.specs import NodeManagerSpec, SpecError, load_spec
from motor.runtime.tls import TlsError, client_context, server_context

log = logging.getLogger("motor.node_manager")


async def serve(settings: NodeSettings) -> int:
    finished = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, finished.set)
    tls = settings.mgmt_tls
    # The controller is called over TLS (https URL); the engine's status port stays plain HTTP.
    connector = aiohttp.TCPConnector(ssl=client_context(tls)) if tls is not None else None
    async with aiohttp.ClientSession(connector=connector) as session:
        node_manager = NodeManager(settings, session)
        shut_down = False

        async def terminate(reason: str) -> None:
            nonlocal shut_down
            shut_down = True
            await node_manager.shutdown(reason)
            finished.set()

        tasks: list[asyncio.Task[None]] = []
        runner = web.AppRunner(
            build_app(
                node_manager, terminate, alive=lambda: bool(tasks) and not any(t.done() for t in tasks)
            ),
            access_log=None,
        )
        await runner.setup()
        site_tls = server_context(tls) if tls is not None else None
        await web.TCPSite(runner, settings.host, settings.port, ssl_context=site_tls).start()
        tasks.extend(node_manager.start())
        failures: list[BaseException] = []

        def watch(task: asyncio.Task[None]) -> None:
            if not task.cancelled():
                failures.append(task.exception() or RuntimeError(f"{task.get_name()} ended"))
                finished.set()

        for task in tasks:
            task.add_done_callback(watch)
        log.info("node manager %s listening on %s", settings.instance_id, settings.url)
        await finished.wait()
        code = 0
        for exc in failures:
            # a wrong credential or refused addresses: a config error, not a crash
            refused = isinstance(exc, PermissionError)
            log.error("%s", exc, exc_info=not refused)
            code = 2 if refused else 1
        if not shut_down:
            await node_manager.shutdown("internal error" if failures else "signal")
        await runner.cleanup()
    log.info("node manager %s stopped", settings.instance_id)
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m motor.node_manager", description=__doc__)
    parser.add_argument("--spec", required=True, type=Path, help="the node manager's spec file")
    args = parser.parse_args(argv)
    try:
        settings = node_settings(load_spec(args.spec, NodeManagerSpec))
    except (SpecError, SettingsError) as exc:
        print(f"motor node manager: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level,
        format=f"%(asctime)s %(levelname)s {settings.instance_id} %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return asyncio.run(serve(settings))
    except TlsError as exc:
        log.error("management TLS: %s", exc)
        return 2
    except OSError as exc:
        log.error("cannot serve on %s:%d: %s", settings.host, settings.port, exc)
        return 1


if __name__ == "__main__":
    sys.exit(main())
