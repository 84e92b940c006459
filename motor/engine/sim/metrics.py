"""Prometheus metrics under vLLM's names (`vllm:*`), plus a few `motor_sim_*` counters of the simulated KV path."""

from dataclasses import dataclass, field

TOKEN_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
# vLLM's cache tiers for cached prompt tokens: the sim's local prefix cache is "device", KV a prefill handed over
# through kv_transfer_params is "p2p", blocks found in the pool by the prompt's own hashes "external_unspecified".
CACHE_HIT_SOURCES = ("device", "host", "p2p", "disk", "external_unspecified")
FINISH_REASONS = ("stop", "length", "abort", "error")
# The faults whose every action is counted (crash_after ends the process: its proof is the exit and its log line).
COUNTED_FAULTS = ("hang", "slowdown", "error_rate", "kv_put_fail", "kv_get_fail", "kv_corrupt", "health_down")


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


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
    injected_errors: int = 0
    faults_fired: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTED_FAULTS, 0))

    def render(
        self,
        *,
        model_name: str,
        running: int,
        waiting: int,
        kv_cache_usage: float,
        engine: str = "0",
        queued_prefill_tokens: int = 0,
        preemptions: int = 0,
    ) -> str:
        labels = f'engine="{_escape(engine)}",model_name="{_escape(model_name)}"'
        lines: list[str] = []

        def metric(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")
            sample_name = f"{name}_total" if kind == "counter" else name
            for extra_labels, value in samples:
                label_text = f"{labels},{extra_labels}" if extra_labels else labels
                lines.append(f"{sample_name}{{{label_text}}} {float(value)}")

        def single(name: str, kind: str, help_text: str, value: float) -> None:
            metric(name, kind, help_text, [("", value)])

        single(
            "vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", running
        )
        single("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", waiting)
        single(
            "vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", kv_cache_usage
        )
        single(
            "vllm:num_preemptions", "counter", "Requests preempted (KV freed, recomputed later).", preemptions
        )
        single(
            "motor_sim_queued_prefill_tokens",
            "gauge",
            "Prompt tokens admitted or waiting whose prefill has not been computed yet.",
            queued_prefill_tokens,
        )
        single("vllm:prompt_tokens", "counter", "Number of prefill tokens processed.", self.prompt_tokens)
        single(
            "vllm:generation_tokens",
            "counter",
            "Number of generation tokens processed.",
            self.generation_tokens,
        )
        metric(
            "vllm:prompt_tokens_by_source",
            "counter",
            "Number of prompt tokens by source.",
            [(f'source="{source}"', count) for source, count in self.prompt_tokens_by_source.items()],
        )
        metric(
            "vllm:prompt_tokens_cached_by_source",
            "counter",
            "Prefix-cache hit tokens by the cache tier that supplied them: device (the local prefix cache), p2p "
            "(handed over by a prefill through kv_transfer_params) or external_unspecified (found in the pool).",
            [(f'source="{source}"', count) for source, count in self.prompt_tokens_cached_by_source.items()],
        )
        single(
            "vllm:prefix_cache_queries",
            "counter",
            "Prefix cache queries, in tokens.",
            self.prefix_cache_queries,
        )
        single("vllm:prefix_cache_hits", "counter", "Prefix cache hits, in tokens.", self.prefix_cache_hits)
        single(
            "vllm:external_prefix_cache_queries",
            "counter",
            "External prefix cache (KV connector) queries, in tokens.",
            self.external_prefix_cache_queries,
        )
        single(
            "vllm:external_prefix_cache_hits",
            "counter",
            "External prefix cache (KV connector) hits, in tokens.",
            self.external_prefix_cache_hits,
        )
        metric(
            "vllm:request_success",
            "counter",
            "Count of finished requests by finish reason.",
            [(f'finished_reason="{reason}"', count) for reason, count in self.finished.items()],
        )
        single(
            "motor_sim_kv_blocks_written", "counter", "KV blocks written to the pool.", self.kv_blocks_written
        )
        single(
            "motor_sim_kv_blocks_fetched", "counter", "KV blocks read from the pool.", self.kv_blocks_fetched
        )
        single("motor_sim_kv_put_failures", "counter", "Failed KV writes to the pool.", self.kv_put_failures)
        single("motor_sim_kv_get_failures", "counter", "Failed KV reads from the pool.", self.kv_get_failures)
        single(
            "motor_sim_injected_errors",
            "counter",
            "Requests failed by the error-rate fault.",
            self.injected_errors,
        )
        metric(
            "motor_sim_faults_fired",
            "counter",
            "Times an injected fault acted: requests held (hang), slowed (slowdown) or failed (error_rate), "
            "pool reads or writes failed or corrupted (kv_*), health probes answered 503 (health_down).",
            [(f'fault="{fault}"', count) for fault, count in self.faults_fired.items()],
        )
        lines.append("")
        return "\n".join(lines)
