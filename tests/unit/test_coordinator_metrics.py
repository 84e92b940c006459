"""The coordinator's batched metrics (histograms, the request counter, the in-flight gauge) expose exactly what
per-event updates would."""

import math
import os
import random
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest, multiprocess

from motor.coordinator.metrics import ITL_BUCKETS, BatchedHistogram, CoordinatorMetrics


def test_batched_histogram_flush_equals_per_event_observe() -> None:
    direct_registry, batched_registry = CollectorRegistry(), CollectorRegistry()
    direct = Histogram("itl", "x", buckets=ITL_BUCKETS, registry=direct_registry)
    batched = BatchedHistogram(Histogram("itl", "x", buckets=ITL_BUCKETS, registry=batched_registry))
    rng = random.Random(1)
    for _ in range(3):
        for _ in range(500):
            value = rng.choice([0.0, *ITL_BUCKETS, 10.0]) if rng.random() < 0.2 else rng.expovariate(30)
            count = rng.randint(1, 3)
            for _ in range(count):
                direct.observe(value)
            batched.observe(value, count)
        batched.flush()
        assert batched.pending == 0
        batched_lines = generate_latest(batched_registry).decode().splitlines()
        direct_lines = generate_latest(direct_registry).decode().splitlines()
        assert [x for x in batched_lines if "_sum" not in x] == [x for x in direct_lines if "_sum" not in x]
        [batched_sum] = [float(x.split()[-1]) for x in batched_lines if x.startswith("itl_sum")]
        [direct_sum] = [float(x.split()[-1]) for x in direct_lines if x.startswith("itl_sum")]
        assert batched_sum == pytest.approx(direct_sum, rel=1e-9)


# BatchedHistogram adds into prometheus_client's private histogram state (`_upper_bounds`, `_buckets`, `_sum`),
# the only way to batch that also reaches the files of its multiprocess mode. pyproject.toml pins the version
# these tests vouch for.
def test_prometheus_client_is_the_pinned_version() -> None:
    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text(encoding="utf-8"))
    pins = [
        pin for pin in project["project"]["optional-dependencies"]["runtime"] if "prometheus_client" in pin
    ]
    assert pins == [f"prometheus_client=={metadata.version('prometheus_client')}"]


def test_histogram_internals_are_what_batched_histogram_uses() -> None:
    histogram = Histogram("leg", "x", ["leg"], buckets=(0.5, 1), registry=CollectorRegistry()).labels(
        "decode"
    )
    assert histogram._upper_bounds == [0.5, 1.0, math.inf]
    assert len(histogram._buckets) == 3
    histogram._buckets[1].inc(2)
    histogram._sum.inc(1.5)
    assert [bucket.get() for bucket in histogram._buckets] == [0.0, 2.0, 0.0]
    assert histogram._sum.get() == 1.5


MULTIPROCESS_WORKER = """
import random, sys
from prometheus_client import Histogram
from motor.coordinator.metrics import ITL_BUCKETS, BatchedHistogram, CoordinatorMetrics

direct = Histogram("direct", "x", ["leg"], buckets=ITL_BUCKETS).labels("decode")
batched = BatchedHistogram(Histogram("batched", "x", ["leg"], buckets=ITL_BUCKETS).labels("decode"))
rng = random.Random(int(sys.argv[1]))
for _ in range(300):
    value = rng.choice([0.0, *ITL_BUCKETS, 10.0]) if rng.random() < 0.2 else rng.expovariate(30)
    direct.observe(value)
    batched.observe(value)
batched.flush()
"""


def test_batched_histogram_aggregates_like_observe_in_multiprocess_mode(tmp_path: Path) -> None:
    """Two worker processes write prometheus_client's multiprocess files; the management process's
    MultiProcessCollector must sum the batched histogram as it sums the per-event one."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    for seed in (1, 2):
        subprocess.run(
            [sys.executable, "-c", MULTIPROCESS_WORKER, str(seed)], env=env, check=True, timeout=60
        )
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(tmp_path))
    families = {family.name: family for family in registry.collect()}

    def samples(name: str) -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
        return sorted(
            (s.name.removeprefix(name), tuple(sorted(s.labels.items())), s.value)
            for s in families[name].samples
        )

    direct, batched = samples("direct"), samples("batched")
    assert [s for s in batched if s[0] != "_sum"] == [s for s in direct if s[0] != "_sum"]
    assert dict((s[0], s[2]) for s in batched)["_count"] == 600
    [batched_sum] = [value for suffix, _, value in batched if suffix == "_sum"]
    [direct_sum] = [value for suffix, _, value in direct if suffix == "_sum"]
    assert batched_sum == pytest.approx(direct_sum, rel=1e-9)


def test_requests_and_in_flight_are_counted_locally_and_added_on_flush() -> None:
    registry = CollectorRegistry()
    metrics = CoordinatorMetrics(registry)
    for _ in range(3):
        metrics.entered()
    metrics.left()
    metrics.request_done("chat", 200)
    metrics.request_done("chat", 200)
    metrics.request_done("completions", 503)
    in_flight = "motor_coordinator_in_flight_requests"
    assert registry.get_sample_value(in_flight) == 0  # nothing added before the flush
    metrics.flush()
    assert registry.get_sample_value(in_flight) == 2
    requests = "motor_coordinator_requests_total"
    assert registry.get_sample_value(requests, {"route": "chat", "status": "200"}) == 2
    assert registry.get_sample_value(requests, {"route": "completions", "status": "503"}) == 1
    metrics.left()
    metrics.request_done("chat", 200)
    metrics.flush()
    metrics.flush()  # a flush with nothing new adds nothing
    assert registry.get_sample_value(in_flight) == 1
    assert registry.get_sample_value(requests, {"route": "chat", "status": "200"}) == 3
