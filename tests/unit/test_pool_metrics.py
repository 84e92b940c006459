"""The metrics parser on text a real mooncake_master 0.3.13 served.

Captured from /metrics after one client (64 MiB segment) put 1 KiB + a 2-key batch, read them, then wrote
128 x 1 MiB; an excerpt of the page with its HELP lines dropped.
"""

import pytest

from motor.pool.metrics import PoolSnapshot, SegmentUsage, parse_pool_snapshot, parse_prometheus_text

CAPTURED = """\
# TYPE master_allocated_bytes gauge
master_allocated_bytes 55575572
# TYPE master_total_capacity_bytes gauge
master_total_capacity_bytes 67108864
# TYPE segment_allocated_bytes gauge
segment_allocated_bytes{segment="127.0.0.1:14013"} 55575572
# TYPE segment_total_capacity_bytes gauge
segment_total_capacity_bytes{segment="127.0.0.1:14013"} 67108864
# TYPE master_key_count gauge
master_key_count 56
# TYPE master_soft_pin_key_count gauge
master_soft_pin_key_count 0
# TYPE master_active_clients gauge
master_active_clients 1
# TYPE master_value_size_bytes histogram
master_value_size_bytes_bucket{le="4096.000000"} 4
master_value_size_bytes_bucket{le="65536.000000"} 4
master_value_size_bytes_bucket{le="262144.000000"} 4
master_value_size_bytes_bucket{le="1048576.000000"} 132
master_value_size_bytes_bucket{le="4194304.000000"} 132
master_value_size_bytes_bucket{le="16777216.000000"} 132
master_value_size_bytes_bucket{le="67108864.000000"} 132
master_value_size_bytes_bucket{le="+Inf"} 132
master_value_size_bytes_sum 134218772
master_value_size_bytes_count 132
# TYPE master_put_start_requests_total counter
master_put_start_requests_total 139
# TYPE master_put_start_failures_total counter
master_put_start_failures_total 10
# TYPE master_put_start_alloc_failures_total counter
master_put_start_alloc_failures_total 10
# TYPE master_batch_put_start_items_total counter
master_batch_put_start_items_total 2
# TYPE master_batch_put_start_failed_items_total counter
master_batch_put_start_failed_items_total 0
# TYPE mem_cache_hit_nums_ counter
mem_cache_hit_nums_ 3
# TYPE valid_get_nums_ counter
valid_get_nums_ 3
# TYPE total_get_nums_ counter
total_get_nums_ 4
# TYPE master_successful_evictions_total counter
master_successful_evictions_total 6
# TYPE master_attempted_evictions_total counter
master_attempted_evictions_total 6
# TYPE master_evicted_key_count counter
master_evicted_key_count 75
# TYPE master_evicted_size_bytes counter
master_evicted_size_bytes 78643200
# TYPE master_evicted_key_count_mem counter
master_evicted_key_count_mem 75
# TYPE ha_standby_state gauge
ha_standby_state 0
"""


def test_snapshot_of_captured_page() -> None:
    snapshot = parse_pool_snapshot(CAPTURED)

    assert snapshot == PoolSnapshot(
        allocated_bytes=55575572,
        capacity_bytes=67108864,
        key_count=56,
        soft_pinned_key_count=0,
        active_clients=1,
        put_requests=139 + 2,
        put_failures=10,
        get_requests=4,
        get_hits=3,
        eviction_runs=6,
        eviction_attempts=6,
        evicted_keys=75,
        evicted_bytes=78643200,
        segments={"127.0.0.1:14013": SegmentUsage(allocated_bytes=55575572, capacity_bytes=67108864)},
    )
    assert snapshot.used_ratio == pytest.approx(55575572 / 67108864)


def test_labelled_histogram_samples_keep_their_labels() -> None:
    buckets = [
        sample
        for sample in parse_prometheus_text(CAPTURED)
        if sample.name == "master_value_size_bytes_bucket"
    ]

    assert [sample.labels["le"] for sample in buckets][-2:] == ["67108864.000000", "+Inf"]
    assert buckets[-1].value == 132


def test_label_escapes_and_timestamps() -> None:
    text = 'm{a="x\\"y",b="line\\nbreak",c="back\\\\slash"} 2.5 1700000000000\nplain 7\n'

    samples = parse_prometheus_text(text)

    assert samples[0].labels == {"a": 'x"y', "b": "line\nbreak", "c": "back\\slash"}
    assert samples[0].value == 2.5
    assert samples[1].name == "plain" and samples[1].value == 7 and samples[1].labels == {}


def test_empty_pool_has_zero_used_ratio() -> None:
    text = CAPTURED.replace("master_total_capacity_bytes 67108864", "master_total_capacity_bytes 0")

    assert parse_pool_snapshot(text).used_ratio == 0.0


def test_malformed_line_is_named() -> None:
    with pytest.raises(ValueError, match="line 2 is not a Prometheus sample"):
        parse_prometheus_text("ok 1\nthis is not a sample\n")


def test_non_numeric_value_is_refused() -> None:
    with pytest.raises(ValueError, match="line 1: 'abc' is not a sample value"):
        parse_prometheus_text("metric abc\n")


def test_page_of_another_exporter_names_missing_metrics() -> None:
    with pytest.raises(ValueError, match=r"missing master_allocated_bytes.*metrics_port"):
        parse_pool_snapshot("process_cpu_seconds_total 1.5\n")
