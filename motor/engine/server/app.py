"""The engine server: run the engine as a child, probe its /health, serve GET /status, stop it on SIGTERM."""

import asyncio
import logging
import os
import signal
import time
from dataclasses import dataclass

import aiohttp
from aiohttp import web

from motor.engine.patches.runtime import shim_dir
from motor.engine.server.health import HealthTracker
from motor.protocol.credentials import is_motor_credential, redacted_argv
from motor.protocol.engine import EngineStatus
from motor.runtime.processes import ENGINE_GRACE_S, Child, shell_exit_code, spawn
from motor.runtime.waits import wait_event

log = logging.getLogger("motor.engine.server")


@dataclass(frozen=True)
class ServerOptions:
    engine_host: str
    engine_port: int
    status_host: str
    status_port: int
    command: list[str]
    probe_interval_s: float = 1.0
    probe_timeout_s: float = 2.0
    failure_threshold: int = 3
    startup_timeout_s: float = 600.0
    stop_timeout_s: float = ENGINE_GRACE_S
    apply_patches: bool = True


def child_environment(base: dict[str, str], *, apply_patches: bool) -> dict[str, str]:
    """The engine's environment: ours (the node manager gave us an allowlisted one) without any of motor's
    credentials, with the patch shim first on PYTHONPATH so the gated fixes load."""
    env = {name: value for name, value in base.items() if not is_motor_credential(name)}
    env.setdefault("PYTHONUNBUFFERED", "1")
    if apply_patches:
        parts = [str(shim_dir()), *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    return env


def status_app(tracker: HealthTracker) -> web.Application:
    async def status(_: web.Request) -> web.Response:
        return web.json_response(EngineStatus(status=tracker.status).model_dump())

    app = web.Application()
    app.router.add_get("/status", status)
    return app


async def serve(options: ServerOptions) -> int:
    """Run until the engine exits or we are told to stop; return the exit code for this process."""
    tracker = HealthTracker(
        failure_threshold=options.failure_threshold,
        startup_timeout_s=options.startup_timeout_s,
        started_at=time.monotonic(),
    )
    runner = web.AppRunner(status_app(tracker), access_log=None)
    await runner.setup()
    # Bind the status port before starting the engine, so a taken port fails fast and starts nothing.
    await web.TCPSite(runner, options.status_host, options.status_port).start()

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)

    engine = start_engine(options)
    log.info("engine started (pid %d): %s", engine.pid, " ".join(redacted_argv(options.command)))
    health_url = f"http://{_url_host(options.engine_host)}:{options.engine_port}/health"
    timeout = aiohttp.ClientTimeout(total=options.probe_timeout_s)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while engine.exit_code() is None and not stop.is_set():
                if await _probe(session, health_url):
                    tracker.probe_succeeded()
                else:
                    tracker.probe_failed(time.monotonic())
                await wait_event(stop, options.probe_interval_s)
        if engine.exit_code() is None:
            log.info("stopping the engine (pid %d)", engine.pid)
            code = await asyncio.to_thread(engine.stop, options.stop_timeout_s)
        else:
            code = await asyncio.to_thread(engine.kill)
            log.warning("engine (pid %d) exited with code %d", engine.pid, code)
        tracker.engine_exited()
        return shell_exit_code(code)
    finally:
        if engine.exit_code() is None:
            engine.kill()
        await runner.cleanup()


def start_engine(options: ServerOptions) -> Child:
    """The engine in its own process group, SIGTERMed by the kernel if this server dies."""
    if not options.command:
        raise ValueError("no engine command given: pass it after `--`")
    env = child_environment(dict(os.environ), apply_patches=options.apply_patches)
    return spawn(options.command, env=env, die_with_parent=True)


async def _probe(session: aiohttp.ClientSession, url: str) -> bool:
    try:
        async with session.get(url) as response:
            return response.status == 200
    except (aiohttp.ClientError, TimeoutError, OSError):
        return False


def _url_host(host: str) -> str:
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host
