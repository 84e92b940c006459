"""`python -m motor.controller --spec FILE` (the ControllerSpec the deployment plan wrote)."""

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

import aiohttp
from aiohttp import web

from motor.controller.app import build_app
from motor.controller.persistence import EtcdUnavailable
from motor.controller.service import Controller
from motor.controller.settings import ControllerSettings, SettingsError, controller_settings
from motor.protocol.specs import ControllerSpec, SpecError, load_spec, url_scheme
from motor.runtime.tls import TlsError, client_context, server_context

log = logging.getLogger("motor.controller")


async def serve(settings: ControllerSettings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    tls = settings.mgmt_tls
    connector = aiohttp.TCPConnector(ssl=client_context(tls)) if tls is not None else None
    async with aiohttp.ClientSession(connector=connector) as session:
        controller = Controller(settings, session)
        restored = await controller.restore()
        if controller.store is not None:
            log.info("persistence on (%s): %d instance(s) restored", controller.store.where, restored)
        work = asyncio.create_task(controller.run())
        runner = web.AppRunner(build_app(controller, healthy=lambda: not work.done()), access_log=None)
        await runner.setup()
        site_tls = server_context(tls) if tls is not None else None
        await web.TCPSite(runner, settings.host, settings.port, ssl_context=site_tls).start()
        log.info(
            "controller listening on %s://%s:%d; coordinators: %s",
            url_scheme(tls),
            settings.host,
            settings.port,
            ", ".join(settings.coordinator_urls),
        )
        done, _ = await asyncio.wait(
            [work, asyncio.create_task(stop.wait())], return_when=asyncio.FIRST_COMPLETED
        )
        if work in done:
            work.result()
        work.cancel()
        await runner.cleanup()
        if controller.store is not None:
            await controller.store.close()
    log.info("controller stopped")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m motor.controller", description=__doc__)
    parser.add_argument("--spec", required=True, type=Path, help="the controller's spec file")
    args = parser.parse_args(argv)
    try:
        settings = controller_settings(load_spec(args.spec, ControllerSpec))
    except (SpecError, SettingsError) as exc:
        print(f"motor controller: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    try:
        asyncio.run(serve(settings))
    except TlsError as exc:
        log.error("management TLS: %s", exc)
        return 2
    except EtcdUnavailable as exc:
        log.error("%s", exc)
        return 1
    except OSError as exc:
        log.error("cannot serve on %s:%d: %s", settings.host, settings.port, exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
