"""One instance's capacity, from what the engines showed (pure).

Prefill: the prompt tokens an instance computed per second over intervals it had a queue at both ends (so it
computed throughout): all such tokens over all such seconds (an engine counts a prompt's tokens when it takes
the prompt on, so one interval alone is off by up to a prompt); before any such interval, the rate the coordinator measured
per instance (prompt tokens computed per second of each prefill leg, queue included), the median over the
prefill instances.

Decode: a decode step advances every running sequence by one token. Over an interval an engine's step
histograms (vLLM's `iteration_tokens_total` and `inter_token_latency_seconds`, which the simulator serves too)
give its mean batch (output tokens of running sequences per step) and its step time (their mean ITL); without
them, its mean batch B̄ (the running gauge at both ends) and its output tokens do: step = B̄ × seconds / tokens,
noisier when sequences come and go within the interval. Across instances and
intervals the step grows with the batch; a least-squares line step = a + b·B through those points (each
weighted by the tokens it covers: a busy interval says more than a sparse one) gives the
largest batch within the ITL objective, B = (ITL − a) / b, further bounded by the KV blocks: an engine holding
B̄ sequences at KV usage u holds B̄ / u at most (`KV_HEADROOM` of that is planned). With the batches all alike
the line cannot be drawn, and the step is taken as proportional to the batch (a = 0), which underestimates the
capacity: the planner then errs towards more decode instances, and says so.
"""

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

KV_HEADROOM = 0.9  # of the sequences the KV blocks hold
MIN_KV_USAGE = 0.05  # below this the KV bound is too noisy to read
MIN_BATCH = 0.5  # an interval with fewer sequences running tells nothing about the step
MIN_SPREAD = 1.0  # sequences between the smallest and largest batch for a line to be fitted
MIN_POINTS = 3


@dataclass(frozen=True)
class DecodeSample:
    """One decode engine over one interval."""

    batch: float  # mean sequences running
    step_s: float  # seconds per step
    kv_usage: float  # mean share of the KV blocks held
    tokens: float = 1.0  # output tokens in the interval: its weight in the fit


@dataclass(frozen=True)
class DecodeCapacity:
    batch: float  # sequences one instance holds within the ITL objective (and its KV)
    tokens_per_s: float  # output tokens it then produces per second
    intercept_s: float
    per_sequence_s: float
    limit: str  # what bounds the batch: "ITL", "KV"
    fitted: bool  # False: one batch size seen, the step taken as proportional to the batch

    def describe(self) -> str:
        how = "fitted" if self.fitted else "one batch size seen, taken as proportional"
        return (
            f"decode step {self.intercept_s * 1000:.1f} ms + {self.per_sequence_s * 1000:.2f} ms/sequence ({how}), "
            f"{self.batch:.1f} sequences per instance ({self.limit}-bound)"
        )


def decode_capacity(samples: Sequence[DecodeSample], itl_objective_s: float) -> DecodeCapacity | None:
    """None before any decode step was seen."""
    points = [s for s in samples if s.batch >= MIN_BATCH and s.step_s > 0]
    if not points:
        return None
    intercept, slope, fitted = _step_line(points)
    # at or past the objective with one sequence, more instances cannot help: plan one sequence each
    by_itl = (itl_objective_s - intercept) / slope if itl_objective_s > intercept else 1.0
    kv_bound = [s.batch / s.kv_usage for s in points if s.kv_usage >= MIN_KV_USAGE]
    by_kv = statistics.median(kv_bound) * KV_HEADROOM if kv_bound else float("inf")
    batch = max(1.0, min(by_itl, by_kv))
    return DecodeCapacity(
        batch=batch,
        tokens_per_s=batch / (intercept + slope * batch),
        intercept_s=intercept,
        per_sequence_s=slope,
        limit="ITL" if by_itl <= by_kv else "KV",
        fitted=fitted,
    )


def _step_line(points: Sequence[DecodeSample]) -> tuple[float, float, bool]:
    """(a, b, fitted) of step = a + b·batch."""
    batches = [s.batch for s in points]
    if len(points) >= MIN_POINTS and max(batches) - min(batches) >= MIN_SPREAD:
        weights = [s.tokens for s in points]
        mean_batch = statistics.fmean(batches, weights)
        mean_step = statistics.fmean([s.step_s for s in points], weights)
        spread = sum(w * (b - mean_batch) ** 2 for w, b in zip(weights, batches, strict=True))
        slope = sum(s.tokens * (s.batch - mean_batch) * (s.step_s - mean_step) for s in points) / spread
        intercept = mean_step - slope * mean_batch
        if slope > 0:
            return max(intercept, 0.0), slope, True
    return 0.0, statistics.median(s.step_s / s.batch for s in points), False


def prefill_capacity(
    busy: Sequence[tuple[float, float]], measured_rates: Sequence[float]
) -> tuple[float | None, str]:
    """(tokens/s one prefill instance computes, how it was measured); `busy` holds (tokens, seconds) of the
    busy intervals."""
    seconds = sum(s for _, s in busy)
    if seconds > 0:
        rate = sum(tokens for tokens, _ in busy) / seconds
        return rate, f"prefill {rate:,.0f} tokens/s per instance over {len(busy)} busy intervals"
    if measured_rates:
        rate = statistics.median(measured_rates)
        return rate, f"prefill {rate:,.0f} tokens/s per instance as the coordinator measured its legs"
    return None, "prefill capacity not measured yet"
