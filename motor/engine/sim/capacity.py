"""The capacity model's cost formulas (docs/sim-capacity-model.md). Pure: no clock, no I/O.

The engine runs in steps, as vLLM does: one step is one forward pass over a token budget that holds one token
per decoding sequence plus chunks of prompts still in prefill. A step costs

    step seconds = (step_overhead_ms + decode_ms_per_seq × decoding sequences
                    + decode_ms_per_1k_context × context tokens of the decoding sequences / 1000) / 1000
                   + prefill tokens in the step / prefill_tokens_per_s

and KV that arrives from the pool or a remote prefill costs, on the receiving engine's link,

    transfer seconds = kv_transfer_latency_ms / 1000
                       + tokens × kv_transfer_bytes_per_token / (kv_link_gb_per_s × 10⁹)

A rate of 0 (prefill tokens/s, link GB/s) means that part costs nothing.
"""

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class CapacityModel:
    enabled: bool = False
    prefill_tokens_per_s: float = 8000.0
    max_num_batched_tokens: int = 2048
    step_overhead_ms: float = 5.0
    decode_ms_per_seq: float = 0.05
    decode_ms_per_1k_context: float = 0.02
    kv_link_gb_per_s: float = 10.0
    kv_transfer_latency_ms: float = 1.0
    kv_transfer_bytes_per_token: int = 131072
    preemption: bool = True

    @classmethod
    def free(cls) -> "CapacityModel":
        """The model on with every cost zero: requests still queue for the budgets, but take no time."""
        return cls(
            enabled=True,
            prefill_tokens_per_s=0,
            step_overhead_ms=0,
            decode_ms_per_seq=0,
            decode_ms_per_1k_context=0,
            kv_link_gb_per_s=0,
            kv_transfer_latency_ms=0,
        )

    def step_seconds(self, *, prefill_tokens: int, decode_seqs: int, context_tokens: int) -> float:
        """The modelled time of one step; a step with nothing to compute costs nothing."""
        if prefill_tokens <= 0 and decode_seqs <= 0:
            return 0.0
        ms = (
            self.step_overhead_ms
            + self.decode_ms_per_seq * decode_seqs
            + self.decode_ms_per_1k_context * context_tokens / 1000.0
        )
        prefill = prefill_tokens / self.prefill_tokens_per_s if self.prefill_tokens_per_s > 0 else 0.0
        return ms / 1000.0 + prefill

    def link_seconds(self, tokens: int) -> float:
        """Time the link is busy moving `tokens` of KV (the part that queues behind other transfers)."""
        if tokens <= 0 or self.kv_link_gb_per_s <= 0:
            return 0.0
        return tokens * self.kv_transfer_bytes_per_token / (self.kv_link_gb_per_s * 1e9)

    def transfer_seconds(self, tokens: int) -> float:
        """One transfer of `tokens` of KV on an idle link: fixed latency plus bytes over bandwidth."""
        if tokens <= 0:
            return 0.0
        return self.kv_transfer_latency_ms / 1000.0 + self.link_seconds(tokens)


def blocks_for(tokens: int, block_size: int) -> int:
    """KV blocks that hold `tokens` tokens."""
    return math.ceil(max(tokens, 0) / block_size)
