"""The batched ITL histogram exposes exactly what per-observation Histogram.observe would."""

import random

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from motor.coordinator.metrics import ITL_BUCKETS, BatchedHistogram


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
