"""The instance registry: applies registrations, heartbeats and timeouts, and reports every status change."""

from dataclasses import dataclass

from motor.controller.lifecycle import Signal, engine_signal, next_status
from motor.protocol.controller import EngineState, Heartbeat, InstanceView, Registration
from motor.protocol.instances import Instance, InstanceStatus


@dataclass
class InstanceRecord:
    instance: Instance
    node_manager_url: str
    engine_state: EngineState
    engine_restarts: int
    last_heartbeat: float
    registrations: int = 0
    engine_failure: str | None = None

    @property
    def status(self) -> InstanceStatus:
        return self.instance.status


@dataclass(frozen=True)
class Change:
    """One instance's status change; `instance` carries the new status (`deleted` once removed).

    `refreshed` marks an active instance whose routing data (endpoints, engine id...) changed in place.
    """

    instance: Instance
    before: InstanceStatus | None
    node_manager_url: str
    refreshed: bool = False

    @property
    def after(self) -> InstanceStatus:
        return self.instance.status


@dataclass(frozen=True)
class Timeouts:
    heartbeat: float  # active → inactive after this much silence
    expired: float  # initial/inactive → deleted after this much silence


class InstanceRegistry:
    def __init__(self, timeouts: Timeouts) -> None:
        self._timeouts = timeouts
        self._records: dict[str, InstanceRecord] = {}

    def register(self, registration: Registration, now: float) -> list[Change]:
        record = self._records.get(registration.instance_id)
        instance = Instance(
            id=registration.instance_id,
            role=registration.role,
            engine_id=registration.engine_id,
            model_name=registration.model_name,
            endpoints=registration.endpoints,
            status=record.status if record else "initial",
        )
        changes: list[Change] = []
        if record is None:
            record = InstanceRecord(
                instance, registration.node_manager_url, registration.engine_state, 0, now
            )
            self._records[instance.id] = record
            changes.append(Change(instance, None, record.node_manager_url))
        else:
            moved = instance != record.instance or registration.node_manager_url != record.node_manager_url
            record.instance = instance
            record.node_manager_url = registration.node_manager_url
            if moved:
                changes.append(Change(instance, instance.status, record.node_manager_url, refreshed=True))
        record.engine_restarts = registration.engine_restarts
        record.engine_failure = registration.engine_failure
        record.registrations += 1
        return changes + self._apply(record, registration.engine_state, now)

    def heartbeat(self, heartbeat: Heartbeat, now: float) -> list[Change] | None:
        """Changes caused by the heartbeat, or None when the instance is unknown."""
        record = self._records.get(heartbeat.instance_id)
        if record is None:
            return None
        record.engine_restarts = heartbeat.engine_restarts
        record.engine_failure = heartbeat.engine_failure
        return self._apply(record, heartbeat.engine_state, now)

    def expire(self, now: float) -> list[Change]:
        changes = []
        for record in list(self._records.values()):
            silent = now - record.last_heartbeat
            if record.status == "active" and silent > self._timeouts.heartbeat:
                changes.append(self._move(record, Signal.HEARTBEAT_TIMEOUT))
            elif record.status != "active" and silent > self._timeouts.expired:
                changes.append(self._move(record, Signal.EXPIRED))
        return changes

    def remove(self, instance_id: str) -> Change | None:
        record = self._records.pop(instance_id, None)
        if record is None:
            return None
        deleted = record.instance.model_copy(update={"status": "deleted"})
        return Change(deleted, record.status, record.node_manager_url)

    def restore(self, instance: Instance, node_manager_url: str, now: float) -> None:
        """Re-create a persisted instance as `initial`: it is pushed as routable only once a heartbeat reports
        its engine healthy, and expires like any instance that never became active."""
        initial = instance.model_copy(update={"status": "initial"})
        self._records[instance.id] = InstanceRecord(initial, node_manager_url, "starting", 0, now)

    def get(self, instance_id: str) -> InstanceRecord | None:
        return self._records.get(instance_id)

    def active(self) -> list[Instance]:
        return [r.instance for r in self._records.values() if r.status == "active"]

    def views(self, now: float) -> list[InstanceView]:
        return [
            InstanceView(
                instance=r.instance,
                node_manager_url=r.node_manager_url,
                engine_state=r.engine_state,
                engine_restarts=r.engine_restarts,
                engine_failure=r.engine_failure,
                registrations=r.registrations,
                seconds_since_heartbeat=round(now - r.last_heartbeat, 3),
            )
            for r in sorted(self._records.values(), key=lambda r: r.instance.id)
        ]

    def _apply(self, record: InstanceRecord, state: EngineState, now: float) -> list[Change]:
        record.last_heartbeat = now
        record.engine_state = state
        before = record.status
        change = self._move(record, engine_signal(state))
        return [change] if change.after != before else []

    def _move(self, record: InstanceRecord, signal: Signal) -> Change:
        before = record.status
        after = next_status(before, signal)
        if after != before:
            record.instance = record.instance.model_copy(update={"status": after})
        if after == "deleted":
            del self._records[record.instance.id]
        return Change(record.instance, before, record.node_manager_url)
