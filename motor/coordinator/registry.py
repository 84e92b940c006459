"""The registered instance set: the only place upstream addresses come from.

Each endpoint of a registered instance becomes a `Target`: an address, nothing that changes per request (the
scheduler keeps the load). Targets keep their identity across refresh events as long as the instance id,
address, role and engine id stay the same; `routable` follows the instance's status and its circuit (an
instance whose circuit breaker is open gets no legs: `set_open_circuits`).
"""

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from motor.protocol.instances import Instance, InstanceEvent, InstanceRole, RefreshResult

ROLES: tuple[InstanceRole, ...] = ("prefill", "decode", "union", "encode")
ROUTABLE_STATUS = "active"


@dataclass(eq=False, slots=True)
class Target:
    """One engine endpoint."""

    key: str
    instance_id: str
    role: InstanceRole
    engine_id: str
    model_name: str
    host: str
    port: int
    bootstrap_port: int | None
    kv_events: str | None = None  # the engine's KV event PUB address (ZMQ), when it publishes
    kv_events_replay: str | None = None  # its replay ROUTER address
    routable: bool = True
    host_header: bytes = field(default=b"", repr=False)

    def __post_init__(self) -> None:
        self.host_header = f"{self.host}:{self.port}".encode()


TargetsByRole = dict[InstanceRole, list[Target]]
Listener = Callable[[list[Target]], None]


class InstanceRegistry:
    def __init__(self) -> None:
        self.instances: dict[str, Instance] = {}
        self.version = 0
        self._targets: dict[str, Target] = {}
        self._by_role: TargetsByRole = {role: [] for role in ROLES}
        self._listeners: list[Listener] = []
        self.open_circuits: frozenset[str] = frozenset()

    def set_open_circuits(self, instance_ids: frozenset[str]) -> None:
        if instance_ids != self.open_circuits:
            self.open_circuits = instance_ids
            self._rebuild()

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)
        listener(list(self._targets.values()))

    def apply(self, event: InstanceEvent) -> RefreshResult:
        if event.event == "set":
            self.instances = {instance.id: instance for instance in event.instances}
        elif event.event == "add":
            for instance in event.instances:
                self.instances[instance.id] = instance
        else:
            for instance in event.instances:
                self.instances.pop(instance.id, None)
        self.version += 1
        self._rebuild()
        return RefreshResult(event=event.event, instance_count=len(self.instances), version=self.version)

    def has_role(self, role: InstanceRole) -> bool:
        return bool(self._by_role[role])

    def knows_role(self, role: InstanceRole) -> bool:
        """Whether any instance of the role is registered, routable or not (starting, inactive, circuit open)."""
        return any(instance.role == role for instance in self.instances.values())

    def targets(self, role: InstanceRole) -> list[Target]:
        """The role's routable endpoints."""
        return self._by_role[role]

    def models(self) -> list[str]:
        return sorted({i.model_name for i in self.instances.values() if i.status == ROUTABLE_STATUS})

    def role_states(self) -> Counter[tuple[str, str]]:
        return Counter((instance.role, instance.status) for instance in self.instances.values())

    def snapshot(self) -> list[Instance]:
        return list(self.instances.values())

    def _rebuild(self) -> None:
        targets: dict[str, Target] = {}
        by_role: TargetsByRole = {role: [] for role in ROLES}
        blocked = self.open_circuits
        for instance in self.instances.values():
            routable = instance.status == ROUTABLE_STATUS and instance.id not in blocked
            for endpoint in instance.endpoints:
                key = f"{instance.id}@{endpoint.host}:{endpoint.port}"
                target = self._targets.get(key)
                if target is None or target.role != instance.role or target.engine_id != instance.engine_id:
                    target = Target(
                        key=key,
                        instance_id=instance.id,
                        role=instance.role,
                        engine_id=instance.engine_id,
                        model_name=instance.model_name,
                        host=endpoint.host,
                        port=endpoint.port,
                        bootstrap_port=endpoint.bootstrap_port,
                        kv_events=endpoint.kv_events,
                        kv_events_replay=endpoint.kv_events_replay,
                        routable=routable,
                    )
                else:
                    target.bootstrap_port = endpoint.bootstrap_port
                    target.kv_events = endpoint.kv_events
                    target.kv_events_replay = endpoint.kv_events_replay
                    target.model_name = instance.model_name
                    target.routable = routable
                targets[key] = target
                if routable:
                    by_role[instance.role].append(target)
        self._targets = targets
        self._by_role = by_role
        everything = list(targets.values())
        for listener in self._listeners:
            listener(everything)
