"""The circuit breakers of one coordinator, kept by the process that holds its instance set (the only process,
or the supervisor of the inference workers): leg outcomes come in (`report`), the open circuits go out
(`publish`, to the registry of each process that routes), and open circuits whose timer ended are probed.

A worker process reports through a `CircuitReporter`: every failure, and a success only on an instance the keeper
named a suspect (a failure on record or an open circuit), so a healthy cluster sends nothing.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from motor.config.models import CircuitConfig
from motor.coordinator.circuits.breakers import CLOSED, Breakers, CircuitView
from motor.coordinator.http.upstream import UpstreamError, UpstreamPool, get
from motor.protocol.instances import Instance

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 2.0
PROBE_CONNECT_TIMEOUT_S = 1.0

Publish = Callable[[CircuitView], None]


class CircuitKeeper:
    def __init__(
        self,
        config: CircuitConfig,
        instances: Callable[[], Iterable[Instance]],
        publish: Publish,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.breakers = Breakers(config)
        self._instances = instances
        self._publish = publish
        self._clock = clock
        self._changed = asyncio.Event()
        self._view = CLOSED
        self._task: asyncio.Task[None] | None = None
        self._pool: UpstreamPool | None = None

    @property
    def view(self) -> CircuitView:
        return self._view

    def report(self, instance_id: str, ok: bool) -> None:
        breakers = self.breakers
        if ok:
            cleared = breakers.succeeded(instance_id)
            if cleared is not None:
                if cleared.trips:
                    log.info("instance %s served a leg well: its circuit breaker is reset", instance_id)
                self._changed_now()
        elif breakers.failed(instance_id, self._clock()):
            self._opened(instance_id)
        else:
            self._changed_now()

    def instances_changed(self) -> None:
        """The instance set changed: breakers of instances gone or registered anew are dropped."""
        if self.breakers.registered((i.id, i.engine_id) for i in self._instances()):
            self._changed_now()

    def start(self) -> None:
        self._pool = UpstreamPool(connect_timeout=PROBE_CONNECT_TIMEOUT_S, write_timeout=PROBE_TIMEOUT_S)
        self._task = asyncio.create_task(self._probe_when_due())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._pool is not None:
            self._pool.close()

    # ---- probes --------------------------------------------------------------------------------------------

    async def _probe_when_due(self) -> None:
        while True:
            now = self._clock()
            timers = [
                b.open_until for _, b in self.breakers.items() if b.open_until is not None and not b.probing
            ]
            wait = max(0.0, min(timers) - now) if timers else None
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._changed.wait()
            due = self.breakers.due(self._clock())
            if due:
                await asyncio.gather(*(self._probe(instance_id) for instance_id in due))

    async def _probe(self, instance_id: str) -> None:
        healthy, why = await self._healthy(instance_id)
        if self.breakers.probed(instance_id, healthy, self._clock()):
            log.info("instance %s answered /health: its circuit is closed", instance_id)
            self._changed_now()
        elif not healthy:
            breaker = self.breakers.get(instance_id)
            if breaker is not None and breaker.open:
                log.warning(
                    "instance %s failed its /health probe (%s): its circuit stays open for %.3g s",
                    instance_id,
                    why,
                    self.breakers.timeout(breaker.trips),
                )
            self._changed_now()

    async def _healthy(self, instance_id: str) -> tuple[bool, str]:
        assert self._pool is not None
        instance = next((i for i in self._instances() if i.id == instance_id), None)
        if instance is None or not instance.endpoints:
            return False, "not registered"
        for endpoint in instance.endpoints:
            try:
                status, _ = await get(self._pool, endpoint.host, endpoint.port, b"/health", PROBE_TIMEOUT_S)
            except UpstreamError as exc:
                return False, str(exc)
            if status != 200:
                return False, f"{endpoint.host}:{endpoint.port} answered {status}"
        return True, ""

    # ---- publishing ----------------------------------------------------------------------------------------

    def _opened(self, instance_id: str) -> None:
        breaker = self.breakers.get(instance_id)
        assert breaker is not None
        log.warning(
            "instance %s failed %d legs in a row: its circuit is open for %.3g s (trip %d); it gets no legs "
            "until it answers /health after that",
            instance_id,
            self.breakers.config.failure_threshold,
            self.breakers.timeout(breaker.trips),
            breaker.trips,
        )
        self._changed_now()

    def _changed_now(self) -> None:
        view = self.breakers.view()
        self._changed.set()
        if view != self._view:
            self._view = view
            self._publish(view)


class CircuitReporter:
    """A worker's side: sends what can change a breaker to the keeper (`send(instance_id, ok)`)."""

    __slots__ = ("_send", "suspects")

    def __init__(self, send: Callable[[str, bool], None]) -> None:
        self._send = send
        self.suspects: frozenset[str] = frozenset()

    def report(self, instance_id: str, ok: bool) -> None:
        if not ok or instance_id in self.suspects:
            self._send(instance_id, ok)


class CircuitCollector(Collector):
    """`motor_coordinator_circuit_open{instance}` (1 open, 0 closed, for every instance with a breaker on
    record) and `motor_coordinator_circuit_trips_total{instance}`, read from the keeper at scrape time."""

    def __init__(self, keeper: CircuitKeeper) -> None:
        self._keeper = keeper

    def collect(self) -> Iterable[GaugeMetricFamily | CounterMetricFamily]:
        breakers = self._keeper.breakers
        state = GaugeMetricFamily(
            "motor_coordinator_circuit_open",
            "1 while the instance's circuit is open (it gets no legs), 0 while a breaker on record is closed",
            labels=["instance"],
        )
        for instance_id, breaker in breakers.items():
            state.add_metric([instance_id], 1 if breaker.open else 0)
        yield state
        trips = CounterMetricFamily(
            "motor_coordinator_circuit_trips",
            "Times the instance's circuit opened since the coordinator started",
            labels=["instance"],
        )
        for instance_id, count in sorted(breakers.trips_total.items()):
            trips.add_metric([instance_id], count)
        yield trips
