"""Request rate and TTFT quantiles from two scrapes of a coordinator's /metrics (what `motor status --watch`
shows), computed as Prometheus would: counter deltas over the time between the scrapes, and quantiles by
linear interpolation inside the histogram bucket that holds them; and the instances whose circuit is open."""

import math
import ssl
import urllib.request
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

REQUESTS = "motor_coordinator_requests"
TTFT = "motor_coordinator_ttft_seconds"
CIRCUIT_OPEN = "motor_coordinator_circuit_open"
IN_FLIGHT = "motor_coordinator_in_flight_requests"
PROMPT_TOKENS = "motor_coordinator_request_prompt_tokens"
MAX_TOKENS = "motor_coordinator_request_max_tokens"


@dataclass(frozen=True)
class CoordinatorSample:
    at: float  # monotonic seconds
    requests: float  # answered requests, every route and status
    errors: float  # answered with a non-2xx status
    ttft_buckets: dict[float, float] = field(default_factory=dict)  # upper bound → cumulative count
    open_circuits: frozenset[str] = frozenset()  # instance ids
    in_flight: float = 0.0  # requests being served
    # of the requests admitted (on arrival): prompt tokens and how many requests; the output tokens asked for at
    # most and how many requests said
    prompt_tokens: float = 0.0
    prompted: float = 0.0
    max_tokens: float = 0.0
    max_stated: float = 0.0


@dataclass(frozen=True)
class Traffic:
    seconds: float
    requests: float
    errors: float
    ttft_p50: float | None
    ttft_p99: float | None
    open_circuits: frozenset[str] = frozenset()  # at the later scrape

    @property
    def rate(self) -> float:
        return self.requests / self.seconds if self.seconds > 0 else 0.0


def parse_sample(text: str, at: float) -> CoordinatorSample:
    requests = errors = in_flight = 0.0
    buckets: dict[float, float] = {}
    open_circuits: set[str] = set()
    sums = {PROMPT_TOKENS: [0.0, 0.0], MAX_TOKENS: [0.0, 0.0]}  # sum, count
    for family in text_string_to_metric_families(text):
        if family.name == REQUESTS:
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    requests += sample.value
                    errors += 0 if sample.labels.get("status", "").startswith("2") else sample.value
        elif family.name == TTFT:
            for sample in family.samples:
                if sample.name.endswith("_bucket"):
                    bound = float(sample.labels["le"])
                    buckets[bound] = buckets.get(bound, 0.0) + sample.value
        elif family.name == CIRCUIT_OPEN:
            open_circuits.update(s.labels["instance"] for s in family.samples if s.value == 1)
        elif family.name == IN_FLIGHT:
            in_flight += sum(sample.value for sample in family.samples)
        elif family.name in sums:
            for sample in family.samples:
                if sample.name.endswith("_sum"):
                    sums[family.name][0] += sample.value
                elif sample.name.endswith("_count"):
                    sums[family.name][1] += sample.value
    (prompt_tokens, prompted), (max_tokens, max_stated) = sums[PROMPT_TOKENS], sums[MAX_TOKENS]
    return CoordinatorSample(
        at,
        requests,
        errors,
        buckets,
        frozenset(open_circuits),
        in_flight,
        prompt_tokens=prompt_tokens,
        prompted=prompted,
        max_tokens=max_tokens,
        max_stated=max_stated,
    )


def scrape_coordinator(
    metrics_url: str, at: float, timeout_s: float = 2.0, context: ssl.SSLContext | None = None
) -> CoordinatorSample:
    with urllib.request.urlopen(metrics_url, timeout=timeout_s, context=context) as response:
        return parse_sample(response.read().decode(), at)


def traffic_between(before: CoordinatorSample | None, after: CoordinatorSample) -> Traffic:
    """What happened between two scrapes (since the coordinator started when `before` is None)."""
    if before is None:
        before = CoordinatorSample(after.at, 0.0, 0.0, {})
    # A restarted coordinator starts its counters at zero again: count from zero then.
    reset = after.requests < before.requests
    base = CoordinatorSample(after.at, 0.0, 0.0, {}) if reset else before
    buckets = {
        bound: count - base.ttft_buckets.get(bound, 0.0) for bound, count in after.ttft_buckets.items()
    }
    return Traffic(
        seconds=after.at - before.at,
        requests=after.requests - base.requests,
        errors=after.errors - base.errors,
        ttft_p50=histogram_quantile(0.5, buckets),
        ttft_p99=histogram_quantile(0.99, buckets),
        open_circuits=after.open_circuits,
    )


def histogram_quantile(q: float, buckets: dict[float, float]) -> float | None:
    """The q-quantile of cumulative `buckets` (upper bound → count), None without observations. Within a
    bucket values are taken as evenly spread; in the +Inf bucket the answer is the highest finite bound."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank = q * buckets[bounds[-1]]
    lower_bound, lower_count = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    return lower_bound
