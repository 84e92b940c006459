"""Prometheus metrics of one coordinator process (aggregated across worker processes by the management
process through prometheus_client's multiprocess mode when `num_workers` > 1)."""

from bisect import bisect_left
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

# `*_created` series double the exposition for no use here.
disable_created_metrics()

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 5)
OVERHEAD_BUCKETS = (0.00005, 0.0001, 0.0002, 0.0003, 0.0005, 0.00075, 0.001, 0.002, 0.005, 0.01, 0.05)
# prompt and output tokens per request: 1, 2, 5, 10, 20, 50 … 500,000
TOKEN_BUCKETS = tuple(float(m * 10**e) for e in range(6) for m in (1, 2, 5))
LEGS = ("encode", "prefill", "kv_wait", "decode", "aggregated")


class BatchedHistogram:
    """Counts observations locally and adds them to a prometheus_client histogram on `flush()`.

    The inter-token latency is observed once per streamed event (20,000 times a second with 2,000 streams at
    10 tokens/s), where `Histogram.observe` (a lock per value) is a measurable share of the relay's cost; the
    per-request histograms use it too. The flush (every sweep, at most 0.5 s apart, and before each scrape)
    adds the counts to the histogram's own bucket values, so the exposition is exactly what per-event
    observe() would give (tests/unit/test_coordinator_metrics.py checks that).

    Those bucket values are prometheus_client's private state (`_upper_bounds`, `_buckets`, `_sum`): writing
    them is what reaches the files of its multiprocess mode, which the management process aggregates, and which
    a collector of our own counts in the worker would never reach. pyproject.toml therefore pins the version
    whose internals the tests check, in one process and across worker processes.
    """

    def __init__(self, histogram: Histogram) -> None:
        self._target = histogram
        self._bounds = list(histogram._upper_bounds)  # ends with +Inf
        self._counts = [0] * len(self._bounds)
        self._sum = 0.0
        self.pending = 0

    def observe(self, value: float, count: int = 1) -> None:
        self._counts[bisect_left(self._bounds, value)] += count
        self._sum += value * count
        self.pending += count

    def flush(self) -> None:
        if not self.pending:
            return
        buckets = self._target._buckets
        for i, count in enumerate(self._counts):
            if count:
                buckets[i].inc(count)
                self._counts[i] = 0
        self._target._sum.inc(self._sum)
        self._sum = 0.0
        self.pending = 0


class CoordinatorMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "motor_coordinator_requests",
            "Client requests answered, by route and HTTP status",
            ["route", "status"],
            registry=registry,
        )
        self.ttft = Histogram(
            "motor_coordinator_ttft_seconds",
            "Time from request arrival to the first streamed event sent to the client",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.itl = Histogram(
            "motor_coordinator_itl_seconds",
            "Time between streamed events relayed to the client (per event)",
            buckets=ITL_BUCKETS,
            registry=registry,
        )
        self.e2e = Histogram(
            "motor_coordinator_e2e_seconds",
            "Time from request arrival to the last byte sent to the client",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.leg = Histogram(
            "motor_coordinator_leg_seconds",
            "Per-leg latency: encode leg, prefill leg, KV wait (prefill done → decode's first byte), decode "
            "(first byte → end), aggregated leg",
            ["leg"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.retries = Counter(
            "motor_coordinator_retries",
            "Legs retried on another instance before anything reached the client",
            ["role", "reason"],
            registry=registry,
        )
        self.encode_legs = Counter(
            "motor_coordinator_encode_legs",
            "Encode legs of multimodal requests, by outcome: done (the encode instance answered), failed (an "
            "error, retried elsewhere while the request allows), aborted (closed by the coordinator)",
            ["outcome"],
            registry=registry,
        )
        self.replays = Counter(
            "motor_coordinator_replays",
            "Streams whose engine failed after output started, by what followed: resumed (replayed and spliced), "
            "completed (the answer was whole, only its end was missing) or refused (with the reason)",
            ["outcome"],
            registry=registry,
        )
        self.resume_gap = Histogram(
            "motor_coordinator_replay_resume_seconds",
            "Replayed streams: last output event before the failure → first output event of the replay",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.cancelled_legs = Counter(
            "motor_coordinator_cancelled_legs",
            "Engine legs closed by the coordinator before they finished",
            ["reason"],
            registry=registry,
        )
        self.kv_pool_queries = Counter(
            "motor_coordinator_kv_pool_queries",
            "kv_cache_affinity: prompts whose leading blocks were asked of the KV pool, by whether it answered",
            ["answer"],
            registry=registry,
        )
        self.kv_pool_blocks = Counter(
            "motor_coordinator_kv_pool_blocks",
            "kv_cache_affinity: leading prompt blocks the KV pool said it held, over the queries it answered",
            registry=registry,
        )
        self.kv_predictions = Counter(
            "motor_coordinator_kv_predictions",
            "kv_cache_affinity: prefill legs by how the prompt tokens the coordinator expected the chosen engine to "
            "find cached compare with the cached tokens it reported: exact, within_block (at most one KV block "
            "apart), over (expected more), under (expected fewer)",
            ["outcome"],
            registry=registry,
        )
        self.kv_events = KvEventMetrics(registry)
        self.prefill_stalls = Counter(
            "motor_coordinator_prefill_stalls",
            "Prefill legs that missed their own deadline (prompt size / the instance's measured prefill rate) and "
            "moved to another instance",
            ["instance"],
            registry=registry,
        )
        self.instance_degraded = Gauge(
            "motor_coordinator_instance_degraded",
            "1 while an instance is degraded by repeated prefill stalls (it gets legs only when no other "
            "instance can take them), 0 once it recovered",
            ["instance", "role"],
            registry=registry,
            multiprocess_mode="max",
        )
        self.rejected = Counter(
            "motor_coordinator_rejected",
            "Requests refused before dispatch",
            ["reason"],
            registry=registry,
        )
        self.overhead = Histogram(
            "motor_coordinator_overhead_seconds",
            "Time spent in the coordinator per request, excluding waits on engines and on the client",
            buckets=OVERHEAD_BUCKETS,
            registry=registry,
        )
        self.prompt_tokens = Histogram(
            "motor_coordinator_request_prompt_tokens",
            "Prompt tokens of each request admitted, as the coordinator counts them on arrival (exact when it "
            "tokenized the prompt, else its estimate of one token per 4 characters)",
            buckets=TOKEN_BUCKETS,
            registry=registry,
        )
        self.max_tokens = Histogram(
            "motor_coordinator_request_max_tokens",
            "The output tokens each request admitted asked for at most (max_tokens or max_completion_tokens), "
            "on arrival; requests that do not say are not counted",
            buckets=TOKEN_BUCKETS,
            registry=registry,
        )
        self.in_flight = Gauge(
            "motor_coordinator_in_flight_requests",
            "Client requests being served",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.itl_batch = BatchedHistogram(self.itl)
        self.ttft_batch = BatchedHistogram(self.ttft)
        self.overhead_batch = BatchedHistogram(self.overhead)
        self._legs = {leg: BatchedHistogram(self.leg.labels(leg)) for leg in LEGS}
        self._e2e: dict[str, BatchedHistogram] = {}
        self._prompt_tokens = BatchedHistogram(self.prompt_tokens)
        self._max_tokens = BatchedHistogram(self.max_tokens)
        self._batches = [
            self.itl_batch,
            self.ttft_batch,
            self.overhead_batch,
            self._prompt_tokens,
            self._max_tokens,
            *self._legs.values(),
        ]
        # counted here, added to the counter and the gauge on flush (as the histograms: a prometheus_client
        # inc() takes a lock, and in multiprocess mode writes a file-backed value, twice per request)
        self._answered: dict[tuple[str, int], int] = {}
        self._request_children: dict[tuple[str, int], Any] = {}
        self._entered = 0

    def flush(self) -> None:
        for batch in self._batches:
            batch.flush()
        if self._entered:
            self.in_flight.inc(self._entered)
            self._entered = 0
        for key, count in self._answered.items():
            child = self._request_children.get(key)
            if child is None:
                route, status = key
                child = self._request_children[key] = self.requests.labels(route, str(status))
            child.inc(count)
        self._answered.clear()

    def entered(self) -> None:
        """A request admitted: in flight until `left()`."""
        self._entered += 1

    def left(self) -> None:
        self._entered -= 1

    def request_done(self, route: str, status: int) -> None:
        key = (route, status)
        self._answered[key] = self._answered.get(key, 0) + 1

    def observe_e2e(self, route: str, seconds: float) -> None:
        batch = self._e2e.get(route)
        if batch is None:
            batch = self._e2e[route] = BatchedHistogram(self.e2e.labels(route))
            self._batches.append(batch)
        batch.observe(seconds)

    def arrived(self, prompt_tokens: int, max_tokens: int | None) -> None:
        """A request admitted: its prompt tokens and the output tokens it asked for at most (None: it did not
        say). The planner reads what arrives from these before the engines finish any of it."""
        self._prompt_tokens.observe(prompt_tokens)
        if max_tokens is not None:
            self._max_tokens.observe(max_tokens)

    def observe_leg(self, leg: str, seconds: float) -> None:
        self._legs[leg].observe(seconds)

    def pool_answered(self, blocks: int | None) -> None:
        """What the KV pool said it held of a prompt (None: it could not say)."""
        if blocks is None:
            self.kv_pool_queries.labels("unknown").inc()
            return
        self.kv_pool_queries.labels("answered").inc()
        self.kv_pool_blocks.inc(blocks)


FEED_STATES = ("connected", "disconnected", "stopped")
INDEX_TIERS = ("device", "cpu", "disk")


class KvEventMetrics:
    """kv_cache_affinity's KV event intake, per publishing instance (the subscriber's `FeedObserver`), and what the
    index holds. Every worker process subscribes to every publisher: counters add up over the workers (each
    worker counts every batch), gauges give the highest value among live workers."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.events = Counter(
            "motor_coordinator_kv_events",
            "kv_cache_affinity: KV event messages received from an instance (its live batches and replayed ones), "
            "by what the index did with them: applied, duplicate (already applied), restarted (the engine's "
            "sequence went back to 0: what the index knew of it was dropped), gap (batches missing before it), "
            "undecodable (not a KV event message: skipped)",
            ["instance", "outcome"],
            registry=registry,
        )
        self.replays = Counter(
            "motor_coordinator_kv_event_replays",
            "kv_cache_affinity: replays asked of an instance's replay socket (on subscribing, and on a gap), by "
            "result: complete or failed (no answer in time, or the engine's buffer no longer held the batches)",
            ["instance", "result"],
            registry=registry,
        )
        self.resyncs = Counter(
            "motor_coordinator_kv_event_resyncs",
            "kv_cache_affinity: gaps no replay could fill: what the index knew of the instance was forgotten and "
            "rebuilt from the next batch",
            ["instance"],
            registry=registry,
        )
        self.feed = Gauge(
            "motor_coordinator_kv_event_feed",
            "kv_cache_affinity: 1 for the state of the subscription to an instance's KV event publisher: "
            "connected, disconnected (not yet reached, or the publisher went away: its engine died or its "
            "socket closed) or stopped (the instance left the set)",
            ["instance", "state"],
            registry=registry,
            multiprocess_mode="livemax",
        )
        self.disconnects = Counter(
            "motor_coordinator_kv_event_disconnects",
            "kv_cache_affinity: times the subscription to an instance's KV event publisher lost its connection (the "
            "engine died, restarted or closed its socket)",
            ["instance"],
            registry=registry,
        )
        self.last_batch = Gauge(
            "motor_coordinator_kv_event_last_batch_timestamp_seconds",
            "kv_cache_affinity: Unix time of the last KV event batch from an instance (seconds since: time() - "
            "this); an idle engine publishes nothing, a dead one also disconnects",
            ["instance"],
            registry=registry,
            multiprocess_mode="livemax",
        )
        self.blocks = Gauge(
            "motor_coordinator_kv_index_blocks",
            "kv_cache_affinity: blocks the index holds for an instance, per tier (device: its own KV cache, cpu, "
            "disk), as of the last sweep (at most 0.5 s old)",
            ["instance", "tier"],
            registry=registry,
            multiprocess_mode="livemax",
        )
        self._events: dict[tuple[str, str], Any] = {}
        self._held: dict[tuple[str, str], int] = {}
        self._states: dict[str, str] = {}

    def batch(self, instance: str, outcome: str) -> None:
        child = self._events.get((instance, outcome))
        if child is None:
            child = self._events[(instance, outcome)] = self.events.labels(instance, outcome)
        child.inc()
        if outcome != "undecodable":
            self.last_batch.labels(instance).set_to_current_time()

    def replay(self, instance: str, complete: bool) -> None:
        self.replays.labels(instance, "complete" if complete else "failed").inc()

    def resync(self, instance: str) -> None:
        self.resyncs.labels(instance).inc()

    def feed_state(self, instance: str, state: str) -> None:
        if self._states.get(instance) == "connected" and state == "disconnected":
            self.disconnects.labels(instance).inc()
        self._states[instance] = state
        for name in FEED_STATES:
            self.feed.labels(instance, name).set(1 if name == state else 0)
        if state == "stopped":
            for tier in INDEX_TIERS:
                self.held(instance, tier, 0)

    def held(self, instance: str, tier: str, blocks: int) -> None:
        if self._held.get((instance, tier)) != blocks:
            self._held[(instance, tier)] = blocks
            self.blocks.labels(instance, tier).set(blocks)


class InstanceCollector(Collector):
    """`motor_coordinator_instances{role,state}` read from the registry at scrape time."""

    def __init__(self, role_states: Callable[[], Iterable[tuple[tuple[str, str], int]]]) -> None:
        self._role_states = role_states

    def collect(self) -> Iterable[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "motor_coordinator_instances", "Registered instances by role and state", labels=["role", "state"]
        )
        for (role, state), count in sorted(self._role_states()):
            family.add_metric([role, state], count)
        yield family


class InfoCollector(Collector):
    """`motor_coordinator_info{profile,version}` = 1: join on it to break series down by dispatch profile, e.g.
    `rate(motor_coordinator_requests_total[1m]) * on (job, instance) group_left (profile) motor_coordinator_info`."""

    def __init__(self, profile: str, version: str) -> None:
        self._labels = [profile, version]

    def collect(self) -> Iterable[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "motor_coordinator_info",
            "The coordinator's dispatch profile and motor version",
            labels=["profile", "version"],
        )
        family.add_metric(self._labels, 1)
        yield family
