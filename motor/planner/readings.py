"""One look at the cluster, as the planner reads it (pure: Prometheus text and JSON bodies in, typed readings out).

An engine's figures are vLLM's series (the simulator serves the same names, plus the prompt tokens it still has
to compute, which vLLM does not export); the coordinator's are its request counter, in-flight gauge and TTFT
histogram (`motor.observability.traffic`), and, from its management `/instances`, the prefill rate it measured
per instance (one coordinator process only).
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from motor.observability.traffic import CoordinatorSample


@dataclass(frozen=True)
class EngineReading:
    """One engine's counters and gauges at one look."""

    role: str
    prompt_computed: float  # prompt tokens it computed (not found in a cache, the pool or a handover)
    generated: float  # output tokens
    finished: float  # requests it finished
    running: float
    waiting: float
    kv_usage: float  # share of its KV blocks held
    queued_prefill_tokens: float | None = None  # prompt tokens still to compute (the simulator's series)
    # per finished request (vLLM's histograms; 0 where the engine has none): output tokens, the max_tokens asked
    # for (of the requests that said), prompt tokens computed
    output_sum: float = 0.0
    output_count: float = 0.0
    max_tokens_sum: float = 0.0
    max_tokens_count: float = 0.0
    computed_sum: float = 0.0
    computed_count: float = 0.0
    # per engine step (vLLM's histograms; 0 where the engine has none): steps, output tokens of running
    # sequences and the seconds before each
    steps: float = 0.0
    itl_count: float = 0.0
    itl_sum: float = 0.0


@dataclass(frozen=True)
class Reading:
    """The cluster at one look, `at` seconds on the planner's clock: the coordinator's figures (None: it did
    not answer), every engine's by instance id, and the prefill rate the coordinator measured per instance,
    tokens/s."""

    at: float
    coordinator: CoordinatorSample | None = None
    engines: dict[str, EngineReading] = field(default_factory=dict)
    prefill_rates: dict[str, float] = field(default_factory=dict)


def samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every sample in a Prometheus text page."""
    return [
        (sample.name, sample.labels, sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]


def total(found: Iterable[tuple[str, dict[str, str], float]], name: str, **labels: str) -> float | None:
    """The sum of the samples named `name` carrying `labels` (None: there is none)."""
    values = [
        value
        for sample_name, sample_labels, value in found
        if sample_name == name and all(sample_labels.get(k) == v for k, v in labels.items())
    ]
    return sum(values) if values else None


def engine_reading(role: str, text: str) -> EngineReading | None:
    """An engine's figures from its `/metrics` (None: not an engine page motor understands)."""
    found = samples(text)
    computed = total(found, "vllm:prompt_tokens_by_source_total", source="local_compute")
    if computed is None:
        computed = total(found, "vllm:prompt_tokens_total")
    generated = total(found, "vllm:generation_tokens_total")
    running = total(found, "vllm:num_requests_running")
    if computed is None or generated is None or running is None:
        return None
    return EngineReading(
        role=role,
        prompt_computed=computed,
        generated=generated,
        finished=total(found, "vllm:request_success_total") or 0.0,
        running=running,
        waiting=total(found, "vllm:num_requests_waiting") or 0.0,
        kv_usage=total(found, "vllm:kv_cache_usage_perc") or 0.0,
        queued_prefill_tokens=total(found, "motor_sim_queued_prefill_tokens"),
        output_sum=total(found, "vllm:request_generation_tokens_sum") or 0.0,
        output_count=total(found, "vllm:request_generation_tokens_count") or 0.0,
        max_tokens_sum=total(found, "vllm:request_params_max_tokens_sum") or 0.0,
        max_tokens_count=total(found, "vllm:request_params_max_tokens_count") or 0.0,
        computed_sum=total(found, "vllm:request_prefill_kv_computed_tokens_sum") or 0.0,
        computed_count=total(found, "vllm:request_prefill_kv_computed_tokens_count") or 0.0,
        steps=total(found, "vllm:iteration_tokens_total_count") or 0.0,
        itl_count=total(found, "vllm:inter_token_latency_seconds_count") or 0.0,
        itl_sum=total(found, "vllm:inter_token_latency_seconds_sum") or 0.0,
    )


def measured_prefill_rates(body: Mapping[str, Any]) -> dict[str, float]:
    """Instance id → the prefill rate the coordinator measured (its management `/instances` body)."""
    rates: dict[str, float] = {}
    for key, load in (body.get("endpoint_load") or {}).items():
        rate = load.get("prefill_tokens_per_second") if isinstance(load, Mapping) else None
        if isinstance(rate, int | float) and rate > 0:
            rates[str(key).split("@", 1)[0]] = float(rate)
    return rates
