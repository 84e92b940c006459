"""Watches the engine: polls its status, restarts it with exponential backoff when it crashes or stays
unhealthy, and reports every change of its state. An engine that exited before it became healthy on
CRASH_LOOP_AFTER starts in a row is `crash_looping`, reported with its exit code and the last lines of its log
(`failure`), as Kubernetes reports a container in CrashLoopBackOff."""

import asyncio
import logging
from collections.abc import Callable

import aiohttp
from pydantic import ValidationError

from motor.node_manager.engine_process import EngineCommand, start_engine
from motor.protocol.controller import EngineState
from motor.protocol.engine import EngineHealth, EngineStatus
from motor.runtime.backoff import Backoff
from motor.runtime.logs import tail
from motor.runtime.processes import ENGINE_SERVER_GRACE_S
from motor.runtime.supervision import ChildState, Health, RestartPolicy, SupervisedChild

log = logging.getLogger(__name__)

POLL_S = 0.5
CRASH_LOOP_AFTER = 2
FAILURE_LOG_LINES = 8
FAILURE_LINE_LIMIT = 300
PROBE_TIMEOUT_S = 2.0
ENGINE_RESTARTS = RestartPolicy(
    backoff=Backoff(initial_s=1.0, factor=2.0, cap_s=30.0),
    stop_grace_s=ENGINE_SERVER_GRACE_S,
    unhealthy_restart_s=10.0,  # a running engine that keeps failing its probe this long is restarted
    poll_s=POLL_S,
    unanswered_probes_allowed=3,  # up to ~8 s of a status port too busy to answer (measured in the soak)
)
_HEALTH: dict[EngineHealth, Health] = {"initial": "starting", "normal": "healthy", "abnormal": "unhealthy"}
_REPORTED: dict[ChildState, EngineState] = {
    "starting": "starting",
    "healthy": "healthy",
    "unhealthy": "unhealthy",
    "restarting": "unhealthy",
    "given_up": "unhealthy",
    "stopped": "stopped",
}


class EngineSupervisor:
    def __init__(
        self,
        command: EngineCommand,
        status_url: str,
        session: aiohttp.ClientSession,
        on_change: Callable[[EngineState], None],
    ) -> None:
        self._command = command
        self._status_url = status_url
        self._session = session
        self._on_change = on_change
        self.state: EngineState = "starting"
        self._engine = SupervisedChild(
            "engine",
            lambda: start_engine(command),
            ENGINE_RESTARTS,
            probe=self._probe,
            on_change=self._report,
        )

    @property
    def pid(self) -> int | None:
        return self._engine.pid

    @property
    def restarts(self) -> int:
        return self._engine.restarts

    def start(self) -> asyncio.Task[None]:
        return self._engine.start()

    async def stop(self) -> None:
        """Stop supervising, then stop the engine's whole process group."""
        await self._engine.stop()
        self._command.pid_path.unlink(missing_ok=True)

    async def _probe(self) -> Health | None:
        try:
            async with self._session.get(
                self._status_url, timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S)
            ) as response:
                return _HEALTH[EngineStatus.model_validate_json(await response.read()).status]
        except (aiohttp.ClientError, TimeoutError, ValidationError):
            return None

    @property
    def failure(self) -> str | None:
        """How the engine's last start ended, while it is crash_looping."""
        if self.state != "crash_looping":
            return None
        engine = self._engine
        log_tail = tail(self._command.log_path, FAILURE_LOG_LINES, line_limit=FAILURE_LINE_LIMIT)
        return (
            f"the engine exited with code {engine.last_exit_code} before it became healthy, "
            f"{engine.exits_before_healthy} starts in a row; last lines of {self._command.log_path}:\n{log_tail}"
        )

    def _report(self, state: ChildState) -> None:
        reported = _REPORTED[state]
        if reported in ("starting", "unhealthy") and self._engine.exits_before_healthy >= CRASH_LOOP_AFTER:
            reported = "crash_looping"
        if reported != self.state:
            self.state = reported
            self._on_change(reported)
