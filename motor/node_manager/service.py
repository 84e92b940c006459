"""The node manager's work: keep the engine running and keep the controller informed."""

import asyncio
import contextlib
import logging

import aiohttp

from motor.node_manager.controller_client import ControllerClient, ControllerUnreachable, NotRegistered
from motor.node_manager.engine_supervisor import EngineSupervisor
from motor.node_manager.settings import NodeSettings
from motor.protocol.controller import EngineState, Heartbeat, Registration
from motor.protocol.node_manager import NodeManagerStatus

log = logging.getLogger(__name__)

REGISTER_RETRY_S = 1.0
FINAL_HEARTBEAT_TIMEOUT_S = 2.0


class NodeManager:
    def __init__(self, settings: NodeSettings, session: aiohttp.ClientSession) -> None:
        self.settings = settings
        self.client = ControllerClient(settings.controller_url, settings.credential, session)
        self.supervisor = EngineSupervisor(
            settings.engine, settings.engine_status_url, session, self._engine_changed
        )
        self.registered = False
        self._beat_now = asyncio.Event()
        self._heartbeats: asyncio.Task[None] | None = None
        self._last_error: str | None = None

    def start(self) -> list[asyncio.Task[None]]:
        self._heartbeats = asyncio.create_task(self._heartbeat_loop())
        return [self.supervisor.start(), self._heartbeats]

    async def shutdown(self, reason: str) -> None:
        """Stop heartbeating, tell the controller the engine is going away, stop the engine."""
        log.info("stopping (%s)", reason)
        if self._heartbeats is not None:
            self._heartbeats.cancel()
            # A heartbeat task that already failed (e.g. a refused token) was reported by its watcher.
            await asyncio.gather(self._heartbeats, return_exceptions=True)
        if self.registered:
            with contextlib.suppress(ControllerUnreachable, NotRegistered, TimeoutError):
                async with asyncio.timeout(FINAL_HEARTBEAT_TIMEOUT_S):
                    await self.client.heartbeat(self._heartbeat("stopped"))
        await self.supervisor.stop()

    def status(self) -> NodeManagerStatus:
        return NodeManagerStatus(
            instance_id=self.settings.instance_id,
            role=self.settings.role,
            engine_state=self.supervisor.state,
            engine_pid=self.supervisor.pid,
            engine_restarts=self.supervisor.restarts,
            registered=self.registered,
        )

    def registration(self) -> Registration:
        return announced(
            self.settings, self.supervisor.state, self.supervisor.restarts, self.supervisor.failure
        )

    async def _heartbeat_loop(self) -> None:
        while True:
            self._beat_now.clear()
            wait = self.settings.heartbeat_interval
            try:
                if self.registered:
                    await self.client.heartbeat(self._heartbeat(self.supervisor.state))
                else:
                    ack = await self.client.register(self.registration())
                    self.registered = True
                    log.info(
                        "registered with %s as %s (%s)",
                        self.settings.controller_url,
                        ack.instance_id,
                        ack.status,
                    )
                self._last_error = None
            except NotRegistered:
                log.warning("the controller no longer knows %s; registering again", self.settings.instance_id)
                self.registered = False
                continue
            except ControllerUnreachable as exc:
                if str(exc) != self._last_error:
                    log.warning("controller call failed: %s; retrying", exc)
                self._last_error = str(exc)
                if not self.registered:
                    wait = min(wait, REGISTER_RETRY_S)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._beat_now.wait()

    def _heartbeat(self, state: EngineState) -> Heartbeat:
        return Heartbeat(
            instance_id=self.settings.instance_id,
            engine_state=state,
            engine_restarts=self.supervisor.restarts,
            engine_failure=self.supervisor.failure,
        )

    def _engine_changed(self, state: EngineState) -> None:
        self._beat_now.set()


def announced(
    settings: NodeSettings,
    engine_state: EngineState,
    engine_restarts: int = 0,
    engine_failure: str | None = None,
) -> Registration:
    """The registration a node manager with `settings` sends."""
    return Registration(
        instance_id=settings.instance_id,
        role=settings.role,
        engine_id=settings.instance_id,
        model_name=settings.model_name,
        node_manager_url=settings.url,
        endpoints=[settings.endpoint],
        engine_state=engine_state,
        engine_restarts=engine_restarts,
        engine_failure=engine_failure,
    )
