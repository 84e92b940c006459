"""Request rate and TTFT quantiles between two coordinator scrapes (motor status --watch)."""

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from motor.coordinator.metrics import CoordinatorMetrics
from motor.observability.traffic import CoordinatorSample, histogram_quantile, parse_sample, traffic_between


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
