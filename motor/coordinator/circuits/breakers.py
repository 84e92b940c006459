"""Per-instance circuit breakers, pure: what a leg's outcome, a probe's answer or a registration does to them.

pyMotor's semantics (`circuit_config`): `failure_threshold` consecutive failures open an instance's circuit for
`min(base_timeout_s * 2**(trips - 1), max_timeout_s)`, `trips` counting the openings since the instance last
served a leg well. There is no half-open state that lets a trial request through: when the timer ends, the
instance's endpoints must answer GET /health; a probe that passes closes the circuit, one that fails opens it
again for the next, longer timeout. Any successful leg closes the circuit and forgets the failures and trips.

An instance that leaves the registered set (the controller removes one whose engine crashed or stopped
answering) or comes back under another engine id starts again with a closed circuit.
"""

from collections.abc import Iterable
from dataclasses import dataclass

from motor.config.models import CircuitConfig


@dataclass(slots=True)
class Breaker:
    failures: int = 0  # consecutive, since the last success or opening
    trips: int = 0  # openings since the last successful leg
    open_until: float | None = None  # None: closed
    probing: bool = False  # the timer ended and a /health probe is under way

    @property
    def open(self) -> bool:
        return self.open_until is not None


@dataclass(frozen=True, slots=True)
class CircuitView:
    """What the routing side needs: the instances that get no legs, and those whose successes matter (a
    failure on record or an open circuit; a success on any other instance changes nothing)."""

    open: frozenset[str]
    suspects: frozenset[str]


CLOSED = CircuitView(frozenset(), frozenset())


class Breakers:
    def __init__(self, config: CircuitConfig) -> None:
        self.config = config
        self._by_instance: dict[str, Breaker] = {}
        self._engines: dict[str, str] = {}  # instance id → the engine id it was registered with
        self.trips_total: dict[str, int] = {}  # instance id → openings since the coordinator started

    def get(self, instance_id: str) -> Breaker | None:
        return self._by_instance.get(instance_id)

    def timeout(self, trips: int) -> float:
        config = self.config
        return min(config.base_timeout_s * 2 ** max(trips - 1, 0), config.max_timeout_s)

    def failed(self, instance_id: str, now: float) -> bool:
        """A leg failed by the instance's fault; True if that opened its circuit. Instances not (or no longer)
        registered are not tracked: legs still in flight on a removed instance fail after it left."""
        if instance_id not in self._engines:
            return False
        breaker = self._by_instance.setdefault(instance_id, Breaker())
        if breaker.open:
            return False
        breaker.failures += 1
        if breaker.failures < self.config.failure_threshold:
            return False
        self._open(instance_id, breaker, now)
        return True

    def succeeded(self, instance_id: str) -> Breaker | None:
        """A leg on the instance went well: its breaker is dropped (returned; None if it had none)."""
        return self._by_instance.pop(instance_id, None)

    def due(self, now: float) -> list[str]:
        """Open circuits whose timer ended and that no probe is asking yet; marks them probing."""
        due = []
        for instance_id, breaker in self._by_instance.items():
            if breaker.open_until is not None and not breaker.probing and breaker.open_until <= now:
                breaker.probing = True
                due.append(instance_id)
        return due

    def probed(self, instance_id: str, healthy: bool, now: float) -> bool:
        """A probe's answer; True if it changed whether the circuit is open (healthy: closed; the trips stay
        on record until a leg succeeds, so an instance that answers /health but fails legs stays out longer
        each time)."""
        breaker = self._by_instance.get(instance_id)
        if breaker is None or not breaker.probing:
            return False
        breaker.probing = False
        if not healthy:
            self._open(instance_id, breaker, now)
            return False
        breaker.open_until = None
        breaker.failures = 0
        return True

    def registered(self, instances: Iterable[tuple[str, str]]) -> bool:
        """The registered set, as (instance id, engine id) pairs: breakers of instances gone or registered anew
        are dropped. True if any breaker was."""
        engines = dict(instances)
        renewed = {i for i, engine in engines.items() if self._engines.get(i) != engine}
        self._engines = engines
        stale = [i for i in self._by_instance if i not in engines or i in renewed]
        for instance_id in stale:
            del self._by_instance[instance_id]
        return bool(stale)

    def view(self) -> CircuitView:
        if not self._by_instance:
            return CLOSED
        return CircuitView(
            frozenset(i for i, b in self._by_instance.items() if b.open), frozenset(self._by_instance)
        )

    def items(self) -> list[tuple[str, Breaker]]:
        return sorted(self._by_instance.items())

    def _open(self, instance_id: str, breaker: Breaker, now: float) -> None:
        breaker.trips += 1
        breaker.failures = 0
        breaker.open_until = now + self.timeout(breaker.trips)
        self.trips_total[instance_id] = self.trips_total.get(instance_id, 0) + 1
