"""Circuit breakers (circuit_config): the pure state machine, the keeper's probes against a live /health, the
registry's routing around open circuits, a worker's reporting and the config's bounds."""

import asyncio
from collections.abc import Callable

import pytest
from pydantic import ValidationError

from motor.config.models import CircuitConfig, CoordinatorConfig
from motor.coordinator.circuits.breakers import Breakers
from motor.coordinator.circuits.keeper import CircuitCollector, CircuitKeeper, CircuitReporter
from motor.coordinator.core import keep_circuits
from motor.coordinator.registry import InstanceRegistry
from motor.protocol.instances import Endpoint, Instance, InstanceEvent

PYMOTOR = CircuitConfig()


def registered(breakers: Breakers, *ids: str, engine: str = "e1") -> Breakers:
    breakers.registered((i, engine) for i in ids)
    return breakers


def test_defaults_are_pymotors() -> None:
    assert (PYMOTOR.enable, PYMOTOR.failure_threshold, PYMOTOR.base_timeout_s, PYMOTOR.max_timeout_s) == (
        True,
        3,
        30.0,
        300.0,
    )


def test_max_timeout_below_base_is_refused_with_the_fix() -> None:
    with pytest.raises(ValidationError, match=r"max_timeout_s .* is below base_timeout_s"):
        CoordinatorConfig.model_validate({"circuit_config": {"base_timeout_s": 60, "max_timeout_s": 30}})


@pytest.mark.parametrize(("trips", "seconds"), [(1, 30), (2, 60), (3, 120), (4, 240), (5, 300), (9, 300)])
def test_open_for_base_times_two_to_the_trips_capped(trips: int, seconds: float) -> None:
    assert Breakers(PYMOTOR).timeout(trips) == seconds


def test_threshold_consecutive_failures_open_and_a_success_in_between_resets() -> None:
    breakers = registered(Breakers(PYMOTOR), "a")
    assert not breakers.failed("a", 0)
    assert not breakers.failed("a", 0)
    assert breakers.succeeded("a") is not None
    assert not breakers.failed("a", 0)
    assert not breakers.failed("a", 0)
    assert breakers.view().open == frozenset()
    assert breakers.view().suspects == {"a"}
    assert breakers.failed("a", 10.0)
    breaker = breakers.get("a")
    assert breaker is not None and breaker.open_until == 40.0 and breaker.trips == 1
    assert breakers.view().open == {"a"}
    assert not breakers.failed("a", 11.0), "failures while open change nothing"
    assert breakers.trips_total == {"a": 1}


def test_probe_after_the_timer_closes_but_trips_stay_until_a_leg_succeeds() -> None:
    breakers = registered(Breakers(PYMOTOR), "a")
    for _ in range(3):
        breakers.failed("a", 0.0)
    assert breakers.due(29.9) == []
    assert breakers.due(30.0) == ["a"]
    assert breakers.due(31.0) == [], "one probe at a time"
    assert breakers.probed("a", True, 31.0)
    assert breakers.view().open == frozenset() and breakers.view().suspects == {"a"}
    for _ in range(3):
        breakers.failed("a", 40.0)
    breaker = breakers.get("a")
    assert breaker is not None and breaker.trips == 2 and breaker.open_until == 100.0, "second trip: 60 s"
    assert breakers.due(100.0) == ["a"]
    assert breakers.probed("a", True, 100.0)
    assert breakers.succeeded("a") is not None
    assert breakers.view().suspects == frozenset()
    for _ in range(3):
        breakers.failed("a", 200.0)
    breaker = breakers.get("a")
    assert breaker is not None and breaker.trips == 1, "a served leg forgot the trips"


def test_a_failed_probe_opens_again_for_the_next_timeout() -> None:
    breakers = registered(Breakers(PYMOTOR), "a")
    for _ in range(3):
        breakers.failed("a", 0.0)
    assert breakers.due(30.0) == ["a"]
    assert not breakers.probed("a", False, 30.0)
    breaker = breakers.get("a")
    assert breaker is not None and breaker.open and breaker.open_until == 90.0 and breaker.trips == 2
    assert breakers.trips_total == {"a": 2}


def test_instances_gone_or_registered_anew_start_closed_and_unknown_ones_are_not_tracked() -> None:
    breakers = registered(Breakers(PYMOTOR), "a", "b")
    for _ in range(3):
        breakers.failed("a", 0.0)
        breakers.failed("b", 0.0)
    assert not breakers.registered([("a", "e1"), ("b", "e1")]), "the same set changes nothing"
    assert breakers.registered([("a", "e2"), ("b", "e1")]), "a's engine restarted"
    assert breakers.view().open == {"b"}
    assert breakers.registered([("a", "e2")])
    assert breakers.view().open == frozenset()
    for _ in range(5):
        assert not breakers.failed("gone", 0.0)
    assert breakers.get("gone") is None


def instance(instance_id: str, port: int, role: str = "decode") -> Instance:
    return Instance(
        id=instance_id,
        role=role,  # type: ignore[arg-type]
        engine_id=f"engine-{instance_id}",
        model_name="m",
        endpoints=[Endpoint(host="127.0.0.1", port=port)],
    )


async def serve_health(status: list[int]) -> tuple[asyncio.Server, int]:
    """A live HTTP server whose GET /health answers `status[0]` (changeable while it runs)."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            if not head:
                break
            code = status[0] if head.startswith(b"GET /health ") else 404
            writer.write(b"HTTP/1.1 %d X\r\ncontent-length: 2\r\n\r\nok" % code)
            await writer.drain()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await answer(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def wait_for(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def test_open_circuit_leaves_routing_then_probe_fails_then_passes() -> None:
    status = [503]
    server, port = await serve_health(status)
    registry = InstanceRegistry()
    registry.apply(InstanceEvent(event="set", instances=[instance("d0", port), instance("d1", port)]))
    config = CircuitConfig(failure_threshold=2, base_timeout_s=0.1, max_timeout_s=0.4)
    keeper = keep_circuits(config, registry)
    keeper.start()
    try:
        keeper.report("d0", False)
        assert {t.instance_id for t in registry.targets("decode")} == {"d0", "d1"}
        keeper.report("d0", False)
        assert {t.instance_id for t in registry.targets("decode")} == {"d1"}, "open: no new legs"
        assert registry.open_circuits == {"d0"}
        await wait_for(lambda: keeper.breakers.trips_total.get("d0") == 2)  # the probe saw 503
        assert registry.open_circuits == {"d0"}
        status[0] = 200
        await wait_for(lambda: not registry.open_circuits, timeout_s=2.0)
        assert {t.instance_id for t in registry.targets("decode")} == {"d0", "d1"}
        assert keeper.view.suspects == {"d0"}, "closed by a probe: trips kept until a leg succeeds"
        keeper.report("d0", True)
        assert keeper.view.suspects == frozenset()
        samples = {
            (s.name, s.labels.get("instance")): s.value
            for family in CircuitCollector(keeper).collect()
            for s in family.samples
        }
        assert samples[("motor_coordinator_circuit_trips_total", "d0")] == 2
        assert ("motor_coordinator_circuit_open", "d0") not in samples, "no breaker on record any more"
    finally:
        await keeper.stop()
        server.close()


async def test_an_unreachable_instance_stays_open() -> None:
    server, port = await serve_health([200])
    server.close()
    await server.wait_closed()
    registry = InstanceRegistry()
    registry.apply(InstanceEvent(event="set", instances=[instance("d0", port)]))
    keeper = keep_circuits(
        CircuitConfig(failure_threshold=1, base_timeout_s=0.05, max_timeout_s=0.05), registry
    )
    keeper.start()
    try:
        keeper.report("d0", False)
        await wait_for(lambda: keeper.breakers.trips_total.get("d0", 0) >= 3)
        assert registry.open_circuits == {"d0"}
        assert registry.targets("decode") == []
    finally:
        await keeper.stop()


async def test_a_controller_registration_anew_clears_the_breaker() -> None:
    registry = InstanceRegistry()
    registry.apply(InstanceEvent(event="set", instances=[instance("d0", 1)]))
    keeper = keep_circuits(CircuitConfig(failure_threshold=1), registry)
    keeper.report("d0", False)
    assert registry.open_circuits == {"d0"}
    registry.apply(InstanceEvent(event="set", instances=[instance("d0", 1)]))
    assert registry.open_circuits == {"d0"}, "the periodic set of the same instances changes nothing"
    restarted = instance("d0", 1).model_copy(update={"engine_id": "engine-d0-restarted"})
    registry.apply(InstanceEvent(event="add", instances=[restarted]))
    assert registry.open_circuits == frozenset()
    assert [t.instance_id for t in registry.targets("decode")] == ["d0"]


def test_a_worker_reports_failures_and_only_suspects_successes() -> None:
    sent: list[tuple[str, bool]] = []
    reporter = CircuitReporter(lambda i, ok: sent.append((i, ok)))
    reporter.report("a", True)
    reporter.report("a", False)
    reporter.suspects = frozenset({"a"})
    reporter.report("a", True)
    reporter.report("b", True)
    assert sent == [("a", False), ("a", True)]


def test_keeper_publishes_only_changes() -> None:
    registry = InstanceRegistry()
    registry.apply(InstanceEvent(event="set", instances=[instance("a", 1), instance("b", 2)]))
    views = []
    keeper = CircuitKeeper(CircuitConfig(failure_threshold=2), registry.snapshot, views.append)
    keeper.instances_changed()
    keeper.report("a", True)
    assert views == [], "a success on a healthy instance changes nothing"
    keeper.report("a", False)
    keeper.report("a", False)
    keeper.report("a", False)
    assert [(v.open, v.suspects) for v in views] == [
        (frozenset(), {"a"}),
        ({"a"}, {"a"}),
    ]
