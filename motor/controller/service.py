"""The controller's state machine wiring: registry → pusher and persistence, timeouts, termination."""

import asyncio
import logging
import time

import aiohttp

from motor.controller.admission import (
    AddressRefused,
    check_addresses,
    check_registration,
    node_manager_base_url,
)
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
from motor.protocol.credentials import instance_credential
from motor.protocol.node_manager import StopRequest
from motor.runtime.waits import wait_event

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
        # Restored instances no node manager confirmed yet: until they are confirmed (or a heartbeat timeout
        # passed) nothing is pushed, so coordinators keep routing on the set they have.
        self._unconfirmed: set[str] = set()
        self._confirmed = asyncio.Event()

    async def restore(self) -> int:
        """Load the persisted instance set (if persistence is on); returns how many instances came back."""
        if self.store is None:
            return 0
        persisted = await self.store.load()
        now = time.monotonic()
        restored = 0
        for item in persisted:
            instance = item.instance
            try:  # what etcd holds gets no further than a registration would
                check_addresses(
                    instance.id,
                    instance.role,
                    item.node_manager_url,
                    instance.endpoints,
                    self.settings.registration,
                )
            except AddressRefused as exc:
                log.warning("not restoring %s from %s: %s", instance.id, self.store.where, exc)
                continue
            # not routable again until its node manager's heartbeat says the engine is healthy
            self._unconfirmed.add(instance.id)
            self.registry.restore(instance, item.node_manager_url, now)
            restored += 1
            log.info("restored instance %s (%s) from %s", instance.id, instance.status, self.store.where)
        return restored

    def register(self, registration: Registration) -> InstanceAck:
        """Raises AddressRefused when the registration names addresses outside the registration policy."""
        try:
            check_registration(registration, self.settings.registration)
        except AddressRefused as exc:
            log.warning("refused the registration of %s: %s", registration.instance_id, exc)
            raise
        self._apply(self.registry.register(registration, time.monotonic()))
        self._confirm(registration.instance_id)
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
        self._confirm(heartbeat.instance_id)
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
            group.create_task(self._push_once_confirmed())
            group.create_task(self._check_timeouts())
            if self.store is not None:
                group.create_task(self.store.run())

    async def _push_once_confirmed(self) -> None:
        """A restored controller (a restart, a standby taking over) pushes its first set once every restored
        instance was heard from, or after a heartbeat timeout: an earlier set would drop from the coordinators'
        routing instances whose node managers merely had not called the new controller yet."""
        if self._unconfirmed:
            await wait_event(self._confirmed, self.settings.heartbeat_timeout)
            if self._unconfirmed:
                log.warning(
                    "not heard from %s since the restore; pushing without them", sorted(self._unconfirmed)
                )
        await self.pusher.run(self.settings.reconcile_interval)

    def _confirm(self, instance_id: str) -> None:
        if self._unconfirmed:
            self._unconfirmed.discard(instance_id)
            if not self._unconfirmed:
                self._confirmed.set()

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
        """Ask the node manager to stop, with its instance's credential, at an address the policy admits (a URL
        restored from etcd is checked here too)."""
        try:
            base_url = node_manager_base_url(url, self.settings.registration)
        except AddressRefused as exc:
            log.warning("not calling the node manager of %s: %s", request.instance_id, exc)
            return False
        credential = instance_credential(self.settings.token, request.instance_id)
        try:
            async with self._session.post(
                f"{base_url}/node-manager/stop",
                json=StopRequest(reason=request.reason).model_dump(),
                headers=bearer(credential),
                timeout=aiohttp.ClientTimeout(total=STOP_TIMEOUT_S),
            ) as response:
                return response.status == 200
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("cannot stop node manager %s of %s: %s", url, request.instance_id, exc)
            return False
