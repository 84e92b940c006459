"""The figures of a window of readings (pure): what the decision reads (motor.planner.decide.Figures).

Counters are summed over consecutive readings of the same instance (an instance that came or went mid-window
counts while it was there; a counter that went down, an engine restarted, is skipped for that interval):

- arrivals/s: requests the coordinator answered plus the change of those in flight, over the window;
- prompt tokens per request: what the prefill engines computed / the requests they finished;
- output tokens per request: what the decode engines generated / the requests they finished;
- capacities: motor.planner.capacity, from the same intervals;
- what waits now, at the last reading: the prompt tokens the prefill engines still have to compute (the
  simulator exports it; for vLLM, waiting requests × prompt tokens per request) and the sequences decoding or
  waiting at the decode engines.
"""

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from motor.config.planner import PlannedRole
from motor.planner.capacity import DecodeSample, decode_capacity, prefill_capacity
from motor.planner.decide import Figures
from motor.planner.readings import EngineReading, Reading


@dataclass
class _Totals:
    computed: float = 0.0
    prefill_finished: float = 0.0
    generated: float = 0.0
    decode_finished: float = 0.0


def window_figures(
    readings: Sequence[Reading],
    itl_objective_s: float,
    counts: dict[PlannedRole, int],
    active: dict[PlannedRole, int],
    changing: str | None = None,
) -> Figures:
    """The figures of `readings` (oldest first) for a job running `counts` (`active` of them routable)."""
    if len(readings) < 2:
        return Figures(counts=counts, active=active, changing=changing)
    totals = _Totals()
    busy_rates: list[float] = []
    decode_samples: list[DecodeSample] = []
    for before, after in itertools.pairwise(readings):
        seconds = after.at - before.at
        if seconds <= 0:
            continue
        for instance, now in after.engines.items():
            then = before.engines.get(instance)
            if then is None or then.role != now.role or not _counting_up(then, now):
                continue
            if now.role == "prefill":
                computed = now.prompt_computed - then.prompt_computed
                totals.computed += computed
                totals.prefill_finished += now.finished - then.finished
                if computed > 0 and _queued(then) and _queued(now):
                    busy_rates.append(computed / seconds)
            elif now.role == "decode":
                generated = now.generated - then.generated
                totals.generated += generated
                totals.decode_finished += now.finished - then.finished
                batch = (then.running + now.running) / 2
                if generated > 0:
                    step = batch * seconds / generated
                    decode_samples.append(DecodeSample(batch, step, (then.kv_usage + now.kv_usage) / 2))
    last = readings[-1]
    prompt_tokens = totals.computed / totals.prefill_finished if totals.prefill_finished > 0 else None
    prefill_rate, prefill_note = prefill_capacity(
        busy_rates,
        [rate for instance, rate in last.prefill_rates.items() if _role(last, instance) == "prefill"],
    )
    decode = decode_capacity(decode_samples, itl_objective_s)
    engines = last.engines.values()
    queued_tokens = sum(
        _queued_tokens(engine, prompt_tokens) for engine in engines if engine.role == "prefill"
    )
    return Figures(
        counts=counts,
        active=active,
        arrival_rate=_arrival_rate(readings),
        prompt_tokens=prompt_tokens,
        output_tokens=totals.generated / totals.decode_finished if totals.decode_finished > 0 else None,
        prefill_tokens_per_s=prefill_rate,
        decode_tokens_per_s=decode.tokens_per_s if decode else None,
        decode_batch=decode.batch if decode else None,
        prefill_queued_tokens=queued_tokens,
        decode_sequences=sum(e.running + e.waiting for e in engines if e.role == "decode"),
        changing=changing,
        notes=(prefill_note, decode.describe() if decode else "decode capacity not measured yet"),
    )


def _arrival_rate(readings: Sequence[Reading]) -> float | None:
    """Arrivals per second between the coordinator's readings (an interval across its restart is skipped)."""
    samples = [reading.coordinator for reading in readings if reading.coordinator is not None]
    arrived = seconds = 0.0
    for before, after in itertools.pairwise(samples):
        if after.requests < before.requests or after.at <= before.at:
            continue
        arrived += after.requests - before.requests + after.in_flight - before.in_flight
        seconds += after.at - before.at
    return max(arrived, 0.0) / seconds if seconds > 0 else None


def _counting_up(then: EngineReading, now: EngineReading) -> bool:
    return (
        now.prompt_computed >= then.prompt_computed
        and now.generated >= then.generated
        and now.finished >= then.finished
    )


def _queued(engine: EngineReading) -> bool:
    if engine.queued_prefill_tokens is not None:
        return engine.queued_prefill_tokens > 0
    return engine.waiting > 0


def _queued_tokens(engine: EngineReading, prompt_tokens: float | None) -> float:
    if engine.queued_prefill_tokens is not None:
        return engine.queued_prefill_tokens
    return engine.waiting * (prompt_tokens or 0.0)


def _role(reading: Reading, instance: str) -> str | None:
    engine = reading.engines.get(instance)
    return engine.role if engine is not None else None
