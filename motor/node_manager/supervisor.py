"""Watches the engine: polls its status, restarts it with exponential backoff when it crashes or stays
unhealthy, and reports every change of its state."""

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import aiohttp
from pydantic import ValidationError

from motor.node_manager.engine_process import EngineProcess
from motor.protocol.controller import EngineState
from motor.protocol.engine import EngineStatus

log = logging.getLogger(__name__)

POLL_S = 0.5
PROBE_TIMEOUT_S = 2.0
UNHEALTHY_RESTART_S = 10.0  # a running engine that keeps failing its probe this long is restarted
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 30.0


class EngineSupervisor:
    def __init__(
        self,
        process: EngineProcess,
        status_url: str,
        session: aiohttp.ClientSession,
        on_change: Callable[[EngineState], None],
    ) -> None:
        self._process = process
        self._status_url = status_url
        self._session = session
        self._on_change = on_change
        self.state: EngineState = "starting"
        self.restarts = 0
        self._backoff = BACKOFF_FIRST_S
        self._healthy_since_start = False
        self._unhealthy_since: float | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def start(self) -> asyncio.Task[None]:
        self._task = asyncio.create_task(self._run())
        return self._task

    async def stop(self) -> None:
        """Stop supervising, then stop the engine's whole process group."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._process.stop()
        self._set("stopped")

    async def _run(self) -> None:
        self._process.start()
        while True:
            await asyncio.sleep(POLL_S)
            code = self._process.exit_code()
            if code is not None:
                log.warning("engine exited with code %s", code)
                await self._restart(f"exited with code {code}")
                continue
            health = await self._probe()
            if health == "normal":
                self._healthy_since_start = True
                self._unhealthy_since = None
                self._backoff = BACKOFF_FIRST_S
                self._set("healthy")
            elif health == "initial" or (health is None and not self._healthy_since_start):
                self._set("starting")
            else:
                now = time.monotonic()
                self._unhealthy_since = self._unhealthy_since or now
                self._set("unhealthy")
                if now - self._unhealthy_since >= UNHEALTHY_RESTART_S:
                    await self._restart(f"unhealthy for {UNHEALTHY_RESTART_S:.0f} s")

    async def _restart(self, why: str) -> None:
        self._set("unhealthy")
        await self._process.stop()
        log.warning("engine %s; restarting in %.1f s", why, self._backoff)
        await asyncio.sleep(self._backoff)
        self._backoff = min(self._backoff * 2, BACKOFF_MAX_S)
        self._healthy_since_start = False
        self._unhealthy_since = None
        self.restarts += 1
        self._process.start()
        self._set("starting")

    async def _probe(self) -> str | None:
        try:
            async with self._session.get(
                self._status_url, timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S)
            ) as response:
                return EngineStatus.model_validate_json(await response.read()).status
        except (aiohttp.ClientError, TimeoutError, ValidationError):
            return None

    def _set(self, state: EngineState) -> None:
        if state != self.state:
            log.info("engine %s → %s", self.state, state)
            self.state = state
            self._on_change(state)
