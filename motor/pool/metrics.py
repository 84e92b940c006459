"""Read the pool's state from `mooncake_master`'s Prometheus endpoint into a typed `PoolSnapshot`."""

import re
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

_SAMPLE = re.compile(
    r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+(?P<timestamp>\S+))?$"
)
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


class MetricsUnavailable(RuntimeError):
    """The metrics endpoint did not answer with metrics."""


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True, slots=True)
class SegmentUsage:
    allocated_bytes: int
    capacity_bytes: int


@dataclass(frozen=True, slots=True)
class PoolSnapshot:
    """The master's view of the pool at one scrape. Counters count since the master started."""

    allocated_bytes: int
    capacity_bytes: int
    key_count: int
    soft_pinned_key_count: int
    active_clients: int
    put_requests: int
    put_failures: int
    get_requests: int
    get_hits: int
    eviction_runs: int
    eviction_attempts: int
    evicted_keys: int
    evicted_bytes: int
    segments: Mapping[str, SegmentUsage] = field(default_factory=dict)

    @property
    def used_ratio(self) -> float:
        """allocated / capacity (0.0 while no segment is mounted); eviction starts at the high watermark."""
        return self.allocated_bytes / self.capacity_bytes if self.capacity_bytes else 0.0


def parse_prometheus_text(text: str) -> list[Sample]:
    """Samples of a Prometheus text exposition as written; raise ValueError on a malformed sample line.

    Not prometheus_client's parser: it renames counters whose names lack `_total` (mooncake_master exports
    `total_get_nums_`, `master_evicted_key_count`, ... as counters), which would hide the master's own names."""
    samples = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            raise ValueError(f"line {number} is not a Prometheus sample: {line[:200]!r}")
        labels = {key: _unescape(value) for key, value in _LABEL.findall(match["labels"] or "")}
        samples.append(Sample(match["name"], labels, _parse_value(match["value"], number)))
    return samples


def pool_snapshot(samples: Iterable[Sample]) -> PoolSnapshot:
    """Build the snapshot from a `mooncake_master` scrape; raise ValueError when its metrics are missing."""
    plain: dict[str, float] = {}
    segment_allocated: dict[str, int] = {}
    segment_capacity: dict[str, int] = {}
    for sample in samples:
        segment = sample.labels.get("segment")
        if sample.name == "segment_allocated_bytes" and segment is not None:
            segment_allocated[segment] = int(sample.value)
        elif sample.name == "segment_total_capacity_bytes" and segment is not None:
            segment_capacity[segment] = int(sample.value)
        elif not sample.labels:
            plain[sample.name] = sample.value

    missing = [name for name in _REQUIRED if name not in plain]
    if missing:
        raise ValueError(
            f"not a mooncake_master metrics page (missing {', '.join(missing)}); check that the URL points "
            "at the master's metrics_port and that mooncake-transfer-engine is >= 0.3.13"
        )

    def count(name: str) -> int:
        return int(plain[name])

    return PoolSnapshot(
        allocated_bytes=count("master_allocated_bytes"),
        capacity_bytes=count("master_total_capacity_bytes"),
        key_count=count("master_key_count"),
        soft_pinned_key_count=count("master_soft_pin_key_count"),
        active_clients=count("master_active_clients"),
        put_requests=count("master_put_start_requests_total") + count("master_batch_put_start_items_total"),
        put_failures=(
            count("master_put_start_failures_total") + count("master_batch_put_start_failed_items_total")
        ),
        get_requests=count("total_get_nums_"),
        get_hits=count("valid_get_nums_"),
        eviction_runs=count("master_successful_evictions_total"),
        eviction_attempts=count("master_attempted_evictions_total"),
        evicted_keys=count("master_evicted_key_count"),
        evicted_bytes=count("master_evicted_size_bytes"),
        segments={
            name: SegmentUsage(allocated, segment_capacity.get(name, 0))
            for name, allocated in segment_allocated.items()
        },
    )


def parse_pool_snapshot(text: str) -> PoolSnapshot:
    return pool_snapshot(parse_prometheus_text(text))


def fetch_metrics_text(url: str, *, timeout_s: float = 2.0) -> str:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.read().decode()
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise MetricsUnavailable(
            f"no metrics from {url} within {timeout_s:g} s ({exc}); is mooncake_master running with this "
            "metrics_port?"
        ) from exc


def scrape_pool(url: str, *, timeout_s: float = 2.0) -> PoolSnapshot:
    """GET the master's /metrics and parse it (MetricsUnavailable when it does not answer)."""
    return parse_pool_snapshot(fetch_metrics_text(url, timeout_s=timeout_s))


_REQUIRED = (
    "master_allocated_bytes",
    "master_total_capacity_bytes",
    "master_key_count",
    "master_soft_pin_key_count",
    "master_active_clients",
    "master_put_start_requests_total",
    "master_batch_put_start_items_total",
    "master_put_start_failures_total",
    "master_batch_put_start_failed_items_total",
    "total_get_nums_",
    "valid_get_nums_",
    "master_successful_evictions_total",
    "master_attempted_evictions_total",
    "master_evicted_key_count",
    "master_evicted_size_bytes",
)


def _parse_value(text: str, line_number: int) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"line {line_number}: {text!r} is not a sample value") from None


def _unescape(value: str) -> str:
    return re.sub(r"\\[\\\"n]", lambda match: _UNESCAPE[match.group(0)], value)
