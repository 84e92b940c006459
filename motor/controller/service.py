"""The controller's state machine wiring: registry → pusher and persistence, timeouts, termination."""

import asyncio
import logging
import time

import aiohttp

from motor.controller.persistence import EtcdStore
from motor.controller.pusher import EventPusher
from motor.controller.registry import Change, InstanceRegistry, Timeouts
from motor.controller.settings import ControllerSettings
from motor.protocol.controller import (
    ControllerState,
    Heartbeat,
    InstanceAck,
    Registration,
    TerminateRequest,
    TerminateResult,
    bearer,
)
from motor.protocol.node_manager import StopRequest

log = logging.getLogger(__name__)

STOP_TIMEOUT_S = 10.0


class UnknownInstance(LookupError):
    pass


class Controller:
    def __init__(self, settings: ControllerSettings, session: aiohttp.ClientSession) -> None:
        self.settings = settings
        self._session = session
        self.registry = InstanceRegistry(Timeouts(settings.heartbeat_timeout, settings.expired_timeout))
        self.pusher = EventPusher(
            settings.coordinator_urls, self.registry.active, session, token=settings.token
        )
        self.store = (
            EtcdStore(
                settings.etcd,
                settings.job_id,
                username=settings.etcd_username,
                password=settings.etcd_password,
            )
            if settings.etcd
            else None
        )

    async def restore(self) -> int:
        """Load the persisted instance set (if persistence is on); returns how many instances came back."""
        if self.store is None:
            return 0
        persisted = await self.store.load()
        now = time.monotonic()
        for item in persisted:
            # not routable again until its node manager's heartbeat says the engine is healthy
            self.registry.restore(item.instance, item.node_manager_url, now)
            log.info(
                "restored instance %s (%s) from %s", item.instance.id, item.instance.status, self.store.where
            )
        return len(persisted)

    def register(self, registration: Registration) -> InstanceAck:
        self._apply(self.registry.register(registration, time.monotonic()))
        log.info(
            "registered %s (%s, engine %s)",
            registration.instance_id,
            registration.role,
            registration.engine_state,
        )
        return self._ack(registration.instance_id)

    def heartbeat(self, heartbeat: Heartbeat) -> InstanceAck:
        changes = self.registry.heartbeat(heartbeat, time.monotonic())
        if changes is None:
            raise UnknownInstance(heartbeat.instance_id)
        self._apply(changes)
        return self._ack(heartbeat.instance_id)

    async def terminate(self, request: TerminateRequest) -> TerminateResult:
        record = self.registry.get(request.instance_id)
        if record is None:
            raise UnknownInstance(request.instance_id)
        stopped = await self._stop_node_manager(record.node_manager_url, request)
        change = self.registry.remove(request.instance_id)
        if change is not None:
            self._apply([change])
        log.info("terminated %s (%s); node manager stopped: %s", request.instance_id, request.reason, stopped)
        return TerminateResult(instance_id=request.instance_id, node_manager_stopped=stopped)

    def state(self) -> ControllerState:
        return ControllerState(
            instances=self.registry.views(time.monotonic()),
            coordinators=[link.view() for link in self.pusher.links],
        )

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self.pusher.run(self.settings.reconcile_interval))
            group.create_task(self._check_timeouts())
            if self.store is not None:
                group.create_task(self.store.run())

    async def _check_timeouts(self) -> None:
        while True:
            await asyncio.sleep(self.settings.check_interval)
            self._apply(self.registry.expire(time.monotonic()))

    def _apply(self, changes: list[Change]) -> None:
        for change in changes:
            if change.before != change.after:
                log.info("instance %s: %s → %s", change.instance.id, change.before, change.after)
            self.pusher.publish(change)
            if self.store is not None:
                self.store.stage(change)

    def _ack(self, instance_id: str) -> InstanceAck:
        record = self.registry.get(instance_id)
        return InstanceAck(instance_id=instance_id, status=record.status if record else "deleted")

    async def _stop_node_manager(self, url: str, request: TerminateRequest) -> bool:
        try:
            async with self._session.post(
                f"{url.rstrip('/')}/node-manager/stop",
                json=StopRequest(reason=request.reason).model_dump(),
                headers=bearer(self.settings.token),
                timeout=aiohttp.ClientTimeout(total=STOP_TIMEOUT_S),
            ) as response:
                return response.status == 200
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("cannot stop node manager %s of %s: %s", url, request.instance_id, exc)
            return False
