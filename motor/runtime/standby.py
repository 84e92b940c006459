"""Run a component as one process of an active/standby pair (a `StandbySpec`).

The process answers its probes on its own `probe_port` from the start: `/startup` and `/liveness` 200 while it
runs, `/readiness` 200 only while it leads (so a Kubernetes Service routes to the leader alone), `/leadership`
says which it is. It binds nothing else until it holds the lock (motor.runtime.leader); then it runs the
component (`lead`) until told to stop, and releases the lock so that its standby takes over at once. A leader
whose lease expired stops leading and exits with LOST_LEADERSHIP_EXIT; its supervisor starts it again, as the
standby.
"""

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from motor.protocol.specs import StandbySpec
from motor.runtime.etcd import etcd_client
from motor.runtime.leader import ElectionSettings, LeaderElection

log = logging.getLogger(__name__)

LOST_LEADERSHIP_EXIT = 3

Lead = Callable[[asyncio.Event], Awaitable[None]]


class LeadershipProbes:
    def __init__(self, name: str) -> None:
        self.name = name
        self.leading_since: float | None = None
        self.healthy = True
        self._runner: web.AppRunner | None = None

    async def start(self, host: str, port: int) -> None:
        app = web.Application()
        app.router.add_get("/startup", self._alive)
        app.router.add_get("/liveness", self._alive)
        app.router.add_get("/readiness", self._ready)
        app.router.add_get("/leadership", self._leadership)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def _body(self) -> dict[str, object]:
        leading = self.leading_since is not None
        body: dict[str, object] = {"component": self.name, "role": "leader" if leading else "standby"}
        if self.leading_since is not None:
            body["leading_for_s"] = round(time.monotonic() - self.leading_since, 3)
        return body

    async def _alive(self, request: web.Request) -> web.Response:
        return web.json_response(self._body(), status=200 if self.healthy else 503)

    async def _ready(self, request: web.Request) -> web.Response:
        ready = self.leading_since is not None and self.healthy
        return web.json_response(self._body(), status=200 if ready else 503)

    async def _leadership(self, request: web.Request) -> web.Response:
        return web.json_response(self._body())


async def run_with_standby(spec: StandbySpec, host: str, name: str, lead: Lead, stop: asyncio.Event) -> int:
    """Answer probes, wait for the lock, then `lead(until)` until `stop` (exit code 0) or the lease is lost
    (LOST_LEADERSHIP_EXIT); `until` is set in both cases."""
    probes = LeadershipProbes(name)
    await probes.start(host, spec.probe_port)
    settings = ElectionSettings(
        lock_key=spec.lock_key,
        lease_ttl=spec.lease_ttl,
        refresh_interval=min(spec.refresh_interval, spec.lease_ttl / 3),
        retry_interval=spec.retry_interval,
        max_failures=spec.max_failures,
    )
    username, password = spec.etcd.username.resolve(os.environ), spec.etcd.password.resolve(os.environ)
    election = LeaderElection(
        lambda: etcd_client(spec.etcd, username, password), settings, name=name, timeout_s=spec.etcd.timeout
    )
    log.info(
        "%s: standby; answering probes on %s:%d, waiting for %s", name, host, spec.probe_port, spec.lock_key
    )
    try:
        if not await election.acquire(stop):
            return 0
        probes.leading_since = time.monotonic()
        until = asyncio.Event()
        holding = asyncio.create_task(election.hold())
        holding.add_done_callback(lambda _: until.set())
        stopping = asyncio.create_task(stop.wait())
        stopping.add_done_callback(lambda _: until.set())
        try:
            await lead(until)
        except BaseException:
            probes.healthy = False
            raise
        finally:
            stopping.cancel()
            holding.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await holding
        if not election.leading:
            return LOST_LEADERSHIP_EXIT
        return 0
    finally:
        await election.release()
        await election.close()
        await probes.stop()
