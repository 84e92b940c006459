"""`python -m motor.planner --spec FILE` (the PlannerSpec the deployment plan wrote)."""

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

import aiohttp
from aiohttp import web

from motor.planner.actuate import Actuator, LocalActuator
from motor.planner.app import build_app
from motor.planner.journal import Journal
from motor.planner.scrape import Scraper
from motor.planner.service import Planner
from motor.protocol.specs import PlannerSpec, SpecError, load_spec, url_scheme
from motor.runtime.tls import TlsError, client_context, server_context

log = logging.getLogger("motor.planner")


def actuator_of(spec: PlannerSpec, scraper: Scraper) -> Actuator:
    if spec.backend == "local":
        assert spec.job_dir is not None
        return LocalActuator(Path(spec.job_dir))
    from motor.planner.kubernetes import KubernetesActuator  # needs the k8s extra

    return KubernetesActuator.in_cluster(spec, scraper)


async def serve(spec: PlannerSpec, token: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    tls = spec.mgmt_tls
    connector = aiohttp.TCPConnector(ssl=client_context(tls)) if tls is not None else None
    async with aiohttp.ClientSession(connector=connector) as session:
        scraper = Scraper(session, spec.controller_url, spec.coordinator_mgmt_url, token)
        planner = Planner(spec, scraper, actuator_of(spec, scraper), Journal(Path(spec.run_dir)))
        work = asyncio.create_task(planner.run())
        runner = web.AppRunner(build_app(planner, healthy=lambda: not work.done()), access_log=None)
        await runner.setup()
        site_tls = server_context(tls) if tls is not None else None
        await web.TCPSite(runner, spec.bind_host, spec.port, ssl_context=site_tls).start()
        log.info(
            "planner listening on %s://%s:%d; bounds %s; objectives TTFT %.0f ms, ITL %.0f ms",
            url_scheme(tls),
            spec.bind_host,
            spec.port,
            spec.bounds.model_dump(),
            spec.config.ttft_slo_ms,
            spec.config.itl_slo_ms,
        )
        done, _ = await asyncio.wait(
            [work, asyncio.create_task(stop.wait())], return_when=asyncio.FIRST_COMPLETED
        )
        await planner.stop()
        if work in done:
            work.result()
        work.cancel()
        await runner.cleanup()
    log.info("planner stopped")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m motor.planner", description=__doc__)
    parser.add_argument("--spec", required=True, type=Path, help="the planner's spec file")
    args = parser.parse_args(argv)
    try:
        spec = load_spec(args.spec, PlannerSpec)
    except SpecError as exc:
        print(f"motor planner: {exc}", file=sys.stderr)
        return 2
    token = spec.token.resolve()
    if not token:
        print(
            f"motor planner: {spec.token.env} is not set: the planner lists and drains instances through the "
            "controller with its token",
            file=sys.stderr,
        )
        return 2
    logging.basicConfig(
        level=spec.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    try:
        asyncio.run(serve(spec, token))
    except TlsError as exc:
        log.error("management TLS: %s", exc)
        return 2
    except OSError as exc:
        log.error("cannot serve on %s:%d: %s", spec.bind_host, spec.port, exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
