"""The simulator's latency model.

    time to first token = (overhead_ms + prefill_ms_per_token × uncached prompt tokens) × slowdown
    inter-token latency = itl_ms × (1 + itl_batch_factor × (running sequences − 1)) × slowdown

Prompt tokens whose KV came from the local prefix cache, the pool or a transfer cost no prefill time. The
running count is read at every token, so ITL follows the batch as sequences join and leave (continuous
batching). Prefill is not slowed by the batch, and does not slow the batch.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class LatencyModel:
    overhead_ms: float = 0.0
    prefill_ms_per_token: float = 0.0
    itl_ms: float = 0.0
    itl_batch_factor: float = 0.0

    def prefill_seconds(self, uncached_tokens: int, slowdown: float = 1.0) -> float:
        return (self.overhead_ms + self.prefill_ms_per_token * uncached_tokens) * slowdown / 1000.0

    def inter_token_seconds(self, running: int, slowdown: float = 1.0) -> float:
        batch_penalty = 1.0 + self.itl_batch_factor * max(running - 1, 0)
        return self.itl_ms * batch_penalty * slowdown / 1000.0
