"""Prometheus metrics under vLLM's names (`vllm:*`), plus a few `motor_sim_*` counters of the simulated KV and
encoder-output paths.

The engine counts into `EngineMetrics` (plain integers, no lock: one event loop); `EngineCollector` turns those
counts and the engine's live figures into metric families at scrape time."""

from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

TOKEN_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
# vLLM's cache tiers for cached prompt tokens: the sim's local prefix cache is "device", KV a prefill handed over
# through kv_transfer_params is "p2p", blocks found in the pool by the prompt's own hashes "external_unspecified".
CACHE_HIT_SOURCES = ("device", "host", "p2p", "disk", "external_unspecified")
FINISH_REASONS = ("stop", "length", "abort", "error")
# The faults whose every action is counted (crash_after ends the process: its proof is the exit and its log line).
COUNTED_FAULTS = ("hang", "slowdown", "error_rate", "kv_put_fail", "kv_get_fail", "kv_corrupt", "health_down")
# vLLM's labels on every engine series
ENGINE_LABELS = ("engine", "model_name")


@dataclass(frozen=True)
class PoolLinkView:
    """The process's link to the KV pool: connected yet, master up, outages, calls refused, seconds down."""

    connected: bool
    up: bool
    outages: int
    refused_calls: int
    down_seconds: float


@dataclass(frozen=True)
class EngineLoad:
    """The engine's live figures at scrape time."""

    running: int
    waiting: int
    kv_cache_usage: float
    queued_prefill_tokens: int
    preemptions: int


# vLLM's buckets: per-request token counts (1-2-5), tokens per engine step, seconds between output tokens
TOKEN_BUCKETS = tuple(float(m * 10**e) for e in range(6) for m in (1, 2, 5))
ITERATION_TOKEN_BUCKETS = (
    1.0,
    8.0,
    16.0,
    32.0,
    64.0,
    128.0,
    256.0,
    512.0,
    1024.0,
    2048.0,
    4096.0,
    8192.0,
    16384.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)


@dataclass
class Histogram:
    """Observations bucketed as vLLM buckets them (`bounds`; the last bucket is +Inf)."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        self.counts = self.counts or [0] * (len(self.bounds) + 1)

    def observe(self, value: float, count: int = 1) -> None:
        self.counts[bisect_left(self.bounds, value)] += count
        self.total += value * count

    def family(self, name: str, documentation: str, label_values: list[str]) -> HistogramMetricFamily:
        family = HistogramMetricFamily(name, documentation, labels=list(ENGINE_LABELS))
        cumulative, buckets = 0, []
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            cumulative += count
            buckets.append(("+Inf" if bound == float("inf") else str(bound), cumulative))
        family.add_metric(label_values, buckets, sum_value=self.total)
        return family


@dataclass
class EngineMetrics:
    prompt_tokens: int = 0
    generation_tokens: int = 0
    prompt_tokens_by_source: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TOKEN_SOURCES, 0))
    prompt_tokens_cached_by_source: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(CACHE_HIT_SOURCES, 0)
    )
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    external_prefix_cache_queries: int = 0
    external_prefix_cache_hits: int = 0
    finished: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FINISH_REASONS, 0))
    # per request that finished with stop or length: the output tokens, the most it asked for, the prompt tokens
    # it computed
    request_generation_tokens: Histogram = field(default_factory=lambda: Histogram(TOKEN_BUCKETS))
    request_params_max_tokens: Histogram = field(default_factory=lambda: Histogram(TOKEN_BUCKETS))
    request_prefill_kv_computed_tokens: Histogram = field(default_factory=lambda: Histogram(TOKEN_BUCKETS))
    # the capacity model's steps: tokens per step, and per output token of a running sequence the step's time
    iteration_tokens: Histogram = field(default_factory=lambda: Histogram(ITERATION_TOKEN_BUCKETS))
    inter_token_latency: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS))
    kv_blocks_written: int = 0
    kv_blocks_fetched: int = 0
    kv_put_failures: int = 0
    kv_get_failures: int = 0
    kv_pool_unavailable: int = 0
    ec_saved: int = 0
    ec_loaded: int = 0
    ec_missing: int = 0
    injected_errors: int = 0
    faults_fired: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTED_FAULTS, 0))


class EngineCollector(Collector):
    """One engine's families, every series labelled with its engine index and model name (as vLLM does).

    `load` is read at each scrape; `pool` (None: the engine has no pool) adds the pool link's families."""

    def __init__(
        self,
        metrics: EngineMetrics,
        *,
        model_name: str,
        engine: str,
        load: Callable[[], EngineLoad],
        pool: Callable[[], PoolLinkView] | None = None,
    ) -> None:
        self._metrics = metrics
        self._labels = [engine, model_name]
        self._load = load
        self._pool = pool

    def collect(self) -> Iterator[Metric]:
        load = self._load()
        counts = self._metrics
        yield self._gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches.", load.running
        )
        yield self._gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", load.waiting
        )
        yield self._gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", load.kv_cache_usage
        )
        yield self._counter(
            "vllm:num_preemptions", "Requests preempted (KV freed, recomputed later).", load.preemptions
        )
        yield self._gauge(
            "motor_sim_queued_prefill_tokens",
            "Prompt tokens admitted or waiting whose prefill has not been computed yet.",
            load.queued_prefill_tokens,
        )
        yield self._counter("vllm:prompt_tokens", "Number of prefill tokens processed.", counts.prompt_tokens)
        yield self._counter(
            "vllm:generation_tokens", "Number of generation tokens processed.", counts.generation_tokens
        )
        yield self._counters_by(
            "vllm:prompt_tokens_by_source",
            "Number of prompt tokens by source.",
            "source",
            counts.prompt_tokens_by_source,
        )
        yield self._counters_by(
            "vllm:prompt_tokens_cached_by_source",
            "Prefix-cache hit tokens by the cache tier that supplied them: device (the local prefix cache), p2p "
            "(handed over by a prefill through kv_transfer_params) or external_unspecified (found in the pool).",
            "source",
            counts.prompt_tokens_cached_by_source,
        )
        yield self._counter(
            "vllm:prefix_cache_queries", "Prefix cache queries, in tokens.", counts.prefix_cache_queries
        )
        yield self._counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in tokens.", counts.prefix_cache_hits
        )
        yield self._counter(
            "vllm:external_prefix_cache_queries",
            "External prefix cache (KV connector) queries, in tokens.",
            counts.external_prefix_cache_queries,
        )
        yield self._counter(
            "vllm:external_prefix_cache_hits",
            "External prefix cache (KV connector) hits, in tokens.",
            counts.external_prefix_cache_hits,
        )
        yield self._counters_by(
            "vllm:request_success",
            "Count of finished requests by finish reason.",
            "finished_reason",
            counts.finished,
        )
        yield counts.request_generation_tokens.family(
            "vllm:request_generation_tokens", "Number of generation tokens processed.", self._labels
        )
        yield counts.request_params_max_tokens.family(
            "vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", self._labels
        )
        yield counts.request_prefill_kv_computed_tokens.family(
            "vllm:request_prefill_kv_computed_tokens",
            "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
            self._labels,
        )
        yield counts.iteration_tokens.family(
            "vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", self._labels
        )
        yield counts.inter_token_latency.family(
            "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", self._labels
        )
        yield self._counter(
            "motor_sim_kv_blocks_written", "KV blocks written to the pool.", counts.kv_blocks_written
        )
        yield self._counter(
            "motor_sim_kv_blocks_fetched", "KV blocks read from the pool.", counts.kv_blocks_fetched
        )
        yield self._counter(
            "motor_sim_kv_put_failures", "Failed KV writes to the pool.", counts.kv_put_failures
        )
        yield self._counter(
            "motor_sim_kv_get_failures", "Failed KV reads from the pool.", counts.kv_get_failures
        )
        if self._pool is not None:
            yield from self._pool_families(self._pool())
        yield self._counter(
            "motor_sim_ec_saved",
            "Encoder outputs (one per image or video) this ec_producer wrote to the shared storage.",
            counts.ec_saved,
        )
        yield self._counter(
            "motor_sim_ec_loaded",
            "Encoder outputs this ec_consumer read from the shared storage.",
            counts.ec_loaded,
        )
        yield self._counter(
            "motor_sim_ec_missing",
            "Encoder outputs this ec_consumer needed and did not find (the request failed with 500).",
            counts.ec_missing,
        )
        yield self._counter(
            "motor_sim_injected_errors", "Requests failed by the error-rate fault.", counts.injected_errors
        )
        yield self._counters_by(
            "motor_sim_faults_fired",
            "Times an injected fault acted: requests held (hang), slowed (slowdown) or failed (error_rate), "
            "pool reads or writes failed or corrupted (kv_*), health probes answered 503 (health_down).",
            "fault",
            counts.faults_fired,
        )

    def _pool_families(self, pool: PoolLinkView) -> Iterator[Metric]:
        yield self._gauge(
            "motor_sim_kv_pool_up",
            "1 while the KV pool's master answers this engine's store client, 0 during an outage or before "
            "the client could connect.",
            float(pool.connected and pool.up),
        )
        yield self._counter(
            "motor_sim_kv_pool_outages", "Times the store client found the pool master gone.", pool.outages
        )
        yield self._counter(
            "motor_sim_kv_pool_down_seconds",
            "Seconds the store client spent in pool outages.",
            pool.down_seconds,
        )
        yield self._counter(
            "motor_sim_kv_pool_unavailable",
            "Pool calls of this engine answered as a miss (KV computed instead) because the pool was "
            "unavailable or too slow.",
            self._metrics.kv_pool_unavailable,
        )

    def _gauge(self, name: str, documentation: str, value: float) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, documentation, labels=ENGINE_LABELS)
        family.add_metric(self._labels, value)
        return family

    def _counter(self, name: str, documentation: str, value: float) -> CounterMetricFamily:
        family = CounterMetricFamily(name, documentation, labels=ENGINE_LABELS)
        family.add_metric(self._labels, value)
        return family

    def _counters_by(
        self, name: str, documentation: str, label: str, counts: Mapping[str, int]
    ) -> CounterMetricFamily:
        family = CounterMetricFamily(name, documentation, labels=[*ENGINE_LABELS, label])
        for key, count in counts.items():
            family.add_metric([*self._labels, key], count)
        return family
