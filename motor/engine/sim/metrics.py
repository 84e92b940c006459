"""Prometheus metrics under vLLM's names (`vllm:*`), plus a few `motor_sim_*` counters of the simulated KV and
encoder-output paths.

The engine counts into `EngineMetrics` (plain integers, no lock: one event loop); `EngineCollector` turns those
counts and the engine's live figures into metric families at scrape time."""

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
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
