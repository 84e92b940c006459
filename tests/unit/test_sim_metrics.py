"""The simulator's exposition: vLLM's families with their types, every series labelled engine and model_name."""

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from motor.engine.sim.metrics import EngineCollector, EngineLoad, EngineMetrics, PoolLinkView

LOAD = EngineLoad(running=1, waiting=2, kv_cache_usage=0.25, queued_prefill_tokens=7, preemptions=3)


def exposition(metrics: EngineMetrics, pool: PoolLinkView | None = None) -> str:
    registry = CollectorRegistry(auto_describe=False)
    view = None if pool is None else (lambda: pool)
    registry.register(
        EngineCollector(metrics, model_name='sim "m"', engine="2", load=lambda: LOAD, pool=view)
    )
    return generate_latest(registry).decode()


def test_families_keep_vllm_names_types_and_labels() -> None:
    metrics = EngineMetrics(prompt_tokens=40, generation_tokens=9)
    metrics.finished["abort"] = 1
    metrics.prompt_tokens_by_source["local_cache_hit"] = 32
    families = {family.name: family for family in text_string_to_metric_families(exposition(metrics))}

    assert families["vllm:num_requests_running"].type == "gauge"
    assert families["vllm:kv_cache_usage_perc"].samples[0].value == 0.25
    assert families["vllm:prompt_tokens"].type == "counter"
    (prompt,) = families["vllm:prompt_tokens"].samples
    assert (prompt.name, prompt.labels, prompt.value) == (
        "vllm:prompt_tokens_total",
        {"engine": "2", "model_name": 'sim "m"'},
        40.0,
    )
    finished = {s.labels["finished_reason"]: s.value for s in families["vllm:request_success"].samples}
    assert finished == {"stop": 0.0, "length": 0.0, "abort": 1.0, "error": 0.0}
    by_source = {s.labels["source"]: s.value for s in families["vllm:prompt_tokens_by_source"].samples}
    assert by_source["local_cache_hit"] == 32.0
    assert families["vllm:num_preemptions"].samples[0].value == 3.0
    assert "motor_sim_kv_pool_up" not in families


def test_pool_families_only_with_a_pool_link() -> None:
    metrics = EngineMetrics(kv_pool_unavailable=4)
    down = PoolLinkView(connected=True, up=False, outages=1, refused_calls=4, down_seconds=2.5)
    samples = {
        sample.name: sample.value
        for family in text_string_to_metric_families(exposition(metrics, down))
        for sample in family.samples
    }
    assert samples["motor_sim_kv_pool_up"] == 0.0
    assert samples["motor_sim_kv_pool_outages_total"] == 1.0
    assert samples["motor_sim_kv_pool_down_seconds_total"] == 2.5
    assert samples["motor_sim_kv_pool_unavailable_total"] == 4.0


def test_tokens_per_finished_request_are_histograms_as_in_vllm() -> None:
    metrics = EngineMetrics()
    for tokens in (1, 60, 60, 300):
        metrics.request_generation_tokens.observe(tokens)
    metrics.request_prefill_kv_computed_tokens.observe(500)
    families = {family.name: family for family in text_string_to_metric_families(exposition(metrics))}
    generation = {
        s.name: s for s in families["vllm:request_generation_tokens"].samples if "le" not in s.labels
    }
    assert generation["vllm:request_generation_tokens_count"].value == 4
    assert generation["vllm:request_generation_tokens_sum"].value == 421
    buckets = {
        s.labels["le"]: s.value
        for s in families["vllm:request_generation_tokens"].samples
        if "le" in s.labels
    }
    assert (buckets["1.0"], buckets["50.0"], buckets["100.0"], buckets["+Inf"]) == (1, 1, 3, 4)
    computed = families["vllm:request_prefill_kv_computed_tokens"].samples
    assert [s.value for s in computed if s.name.endswith("_sum")] == [500.0]


def test_steps_count_their_tokens_and_each_output_token_the_steps_time() -> None:
    metrics = EngineMetrics()
    metrics.iteration_tokens.observe(12)
    metrics.inter_token_latency.observe(0.02, count=10)
    families = {family.name: family for family in text_string_to_metric_families(exposition(metrics))}
    itl = {
        s.name: s.value for s in families["vllm:inter_token_latency_seconds"].samples if "le" not in s.labels
    }
    assert itl == {"vllm:inter_token_latency_seconds_count": 10, "vllm:inter_token_latency_seconds_sum": 0.2}
    steps = {s.name: s.value for s in families["vllm:iteration_tokens_total"].samples if "le" not in s.labels}
    assert steps == {"vllm:iteration_tokens_total_count": 1, "vllm:iteration_tokens_total_sum": 12}
