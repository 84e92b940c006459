"""Request rate, TTFT quantiles and open circuits between two coordinator scrapes (motor status --watch)."""

import io

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from rich.console import Console

from motor.cli import local_status
from motor.config.models import CircuitConfig
from motor.coordinator.circuits.keeper import CircuitCollector, CircuitKeeper
from motor.coordinator.metrics import CoordinatorMetrics
from motor.coordinator.registry import InstanceRegistry
from motor.observability.traffic import CoordinatorSample, histogram_quantile, parse_sample, traffic_between
from motor.protocol.controller import ControllerState, InstanceView
from motor.protocol.instances import Endpoint, Instance, InstanceEvent


def scrape(metrics: CoordinatorMetrics, registry: CollectorRegistry, at: float) -> CoordinatorSample:
    metrics.flush()
    return parse_sample(generate_latest(registry).decode(), at)


def test_rate_errors_and_ttft_quantiles_from_the_coordinators_own_metrics() -> None:
    registry = CollectorRegistry()
    metrics = CoordinatorMetrics(registry)
    for _ in range(3):
        metrics.request_done("chat", 200)
    metrics.ttft_batch.observe(0.02)
    first = scrape(metrics, registry, at=10.0)
    for _ in range(8):
        metrics.request_done("chat", 200)
    metrics.request_done("completions", 404)
    metrics.request_done("completions", 502)
    metrics.ttft_batch.observe(0.03, count=98)  # bucket (0.025, 0.05]
    metrics.ttft_batch.observe(3.0, count=2)  # bucket (2.5, 5]
    second = scrape(metrics, registry, at=12.0)

    since_start = traffic_between(None, first)
    assert since_start.requests == 3 and since_start.errors == 0
    assert since_start.ttft_p50 == pytest.approx(0.0175)  # halfway into (0.01, 0.025]

    window = traffic_between(first, second)
    assert window.seconds == 2.0
    assert window.requests == 10 and window.errors == 2 and window.rate == 5.0
    assert 0.025 < window.ttft_p50 < 0.05  # type: ignore[operator]
    assert 2.5 < window.ttft_p99 <= 5.0  # type: ignore[operator]


def test_what_arrives_is_read_from_the_per_request_token_histograms() -> None:
    registry = CollectorRegistry()
    metrics = CoordinatorMetrics(registry)
    metrics.arrived(2000, 16)
    metrics.arrived(120, None)  # did not say its max_tokens
    metrics.arrived(700, 64)
    sample = scrape(metrics, registry, at=1.0)
    assert (sample.prompt_tokens, sample.prompted) == (2820, 3)
    assert (sample.max_tokens, sample.max_stated) == (80, 2)


def test_a_restarted_coordinator_counts_from_zero() -> None:
    registry = CollectorRegistry()
    metrics = CoordinatorMetrics(registry)
    before = CoordinatorSample(0.0, 100.0, 1.0, {0.1: 50.0, float("inf"): 50.0})
    metrics.request_done("chat", 200)
    after = scrape(metrics, registry, at=1.0)
    assert traffic_between(before, after).requests == 1


def test_quantile_edges() -> None:
    assert histogram_quantile(0.5, {}) is None
    assert histogram_quantile(0.5, {0.1: 0.0, float("inf"): 0.0}) is None
    assert (
        histogram_quantile(0.99, {0.1: 0.0, 1.0: 0.0, float("inf"): 4.0}) == 1.0
    )  # all above the last bound
    assert histogram_quantile(0.5, {0.1: 4.0, float("inf"): 4.0}) == pytest.approx(0.05)


def test_open_circuits_come_from_the_keepers_own_metrics() -> None:
    registry = CollectorRegistry()
    instances = InstanceRegistry()
    instances.apply(
        InstanceEvent(
            event="set",
            instances=[
                Instance(
                    id=name,
                    role="decode",
                    engine_id=name,
                    model_name="m",
                    endpoints=[Endpoint(host="127.0.0.1", port=port)],
                )
                for port, name in enumerate(("d0", "d1", "d2"), start=1)
            ],
        )
    )
    keeper = CircuitKeeper(CircuitConfig(failure_threshold=2), instances.snapshot, lambda _: None)
    keeper.instances_changed()
    registry.register(CircuitCollector(keeper))
    keeper.report("d0", False)
    keeper.report("d0", False)
    keeper.report("d1", False)  # one failure of two: on record, closed
    sample = parse_sample(generate_latest(registry).decode(), at=0.0)
    assert sample.open_circuits == {"d0"}
    assert traffic_between(None, sample).open_circuits == {"d0"}


def test_motor_status_shows_each_instances_circuit() -> None:
    views = [
        InstanceView(
            instance=Instance(
                id=name,
                role="decode",
                engine_id=name,
                model_name="m",
                endpoints=[Endpoint(host="127.0.0.1", port=port)],
            ),
            node_manager_url="http://127.0.0.1:1",
            engine_state="healthy",
            engine_restarts=0,
            registrations=1,
            seconds_since_heartbeat=0.5,
        )
        for port, name in enumerate(("d0", "d1"), start=1)
    ]
    state = ControllerState(instances=views, coordinators=[])
    out = io.StringIO()
    Console(file=out, width=200).print(*local_status._render_instances(state, frozenset({"d0"})))
    rows = {line.split()[0]: line.split() for line in out.getvalue().splitlines() if line.startswith("d")}
    assert "open" in rows["d0"] and "closed" in rows["d1"]
    out = io.StringIO()
    Console(file=out, width=200).print(*local_status._render_instances(state, None))
    assert "CIRCUIT" in out.getvalue() and "open" not in out.getvalue() and "closed" not in out.getvalue()
