"""The figures of a window of readings (pure): what the decision reads (motor.planner.decide.Figures).

The traffic is measured over the decision's window, the capacities over all the readings the planner keeps.
Counters are summed over consecutive readings of the same instance (an instance that came or went mid-window
counts while it was there; a counter that went down, an engine restarted, is skipped for that interval):

- arrivals/s: requests the coordinator answered plus the change of those in flight, over the window;
- prompt tokens per request: what the latest `SIZE_REQUESTS` requests that arrived in the window bring (what
  arrives now: a phase shift shows once that many arrived, not after a whole window), as the coordinator
  counted them on arrival, times the prompt tokens the prefill engines computed per token the coordinator
  counted over every reading kept (that ratio holds the engines' tokenizer against the coordinator's count, and
  what was found cached: a phase shift moves what arrives at once, not the ratio; the ratio is low by the share
  of the history's prompt tokens still waiting at its end, a few per cent over the 120 s kept). Until
  `CALIBRATION_REQUESTS` arrived, or without the coordinator's counts: what the prefill engines computed for
  the requests they finished (vLLM's `request_prefill_kv_computed_tokens` histogram), else what they computed /
  the requests they finished;
- output tokens per request: the max_tokens of the same latest arrivals, times what the decode engines'
  finished requests generated per max_tokens they asked for (vLLM's `request_generation_tokens` and
  `request_params_max_tokens` histograms, over every reading kept), when at least `STATED_SHARE` of those
  arrivals said how many they want and `CALIBRATION_REQUESTS` finished; else what the decode engines generated
  for the requests they finished (`request_generation_tokens`), else what they generated / the requests they
  finished (noisier: tokens of requests still running count, while only finished requests do);
- capacities: motor.planner.capacity, from the same intervals;
- what waits now, averaged over the readings of the last `BACKLOG_S`: the prompt tokens the prefill engines
  still have to compute (the simulator exports it; for vLLM, waiting requests × prompt tokens per request) and
  the sequences decoding or waiting at the decode engines.

Sizes from finished requests lag a phase shift by as long as the requests of the previous phase take to
finish (12 s at the answer-heavy shift of benchmarks/planner_phases.py); sizes on arrival do not.
"""

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from motor.config.planner import PlannedRole
from motor.planner.capacity import DecodeSample, decode_capacity, prefill_capacity
from motor.planner.decide import Figures
from motor.planner.readings import EngineReading, Reading

BACKLOG_S = 3.0  # what waits is averaged over the readings of the last few seconds: one look is noisy
CALIBRATION_REQUESTS = 20  # arrived (prompt) or finished (output) before sizes on arrival are used
SIZE_REQUESTS = 20  # the latest arrivals the sizes are averaged over (within the window)
STATED_SHARE = 0.9  # of the arrivals that said their max_tokens, for output sizes on arrival


@dataclass
class _Totals:
    computed: float = 0.0
    prefill_finished: float = 0.0
    generated: float = 0.0
    decode_finished: float = 0.0
    computed_sum: float = 0.0  # of the histograms: tokens of the requests finished, and how many
    computed_count: float = 0.0
    output_sum: float = 0.0
    output_count: float = 0.0
    max_tokens_sum: float = 0.0  # of the decode engines' finished requests that said
    max_tokens_count: float = 0.0

    def prompt_tokens(self) -> float | None:
        return _ratio(self.computed_sum, self.computed_count) or _ratio(self.computed, self.prefill_finished)

    def output_tokens(self) -> float | None:
        return _ratio(self.output_sum, self.output_count) or _ratio(self.generated, self.decode_finished)


def _ratio(part: float, whole: float) -> float | None:
    return part / whole if whole > 0 else None


@dataclass
class _Arrived:
    """What the coordinator counted of the requests it admitted between two of its readings, summed."""

    prompt_tokens: float = 0.0
    prompted: float = 0.0
    max_tokens: float = 0.0
    max_stated: float = 0.0


def _arrived(readings: Sequence[Reading], enough: float = math.inf) -> _Arrived:
    """Summed over consecutive coordinator readings from the newest back, until `enough` requests arrived."""
    samples = [reading.coordinator for reading in readings if reading.coordinator is not None]
    arrived = _Arrived()
    for before, after in reversed(list(itertools.pairwise(samples))):
        if arrived.prompted >= enough:
            break
        if after.prompted < before.prompted or after.max_stated < before.max_stated:
            continue  # the coordinator restarted
        arrived.prompt_tokens += after.prompt_tokens - before.prompt_tokens
        arrived.prompted += after.prompted - before.prompted
        arrived.max_tokens += after.max_tokens - before.max_tokens
        arrived.max_stated += after.max_stated - before.max_stated
    return arrived


def _sizes(
    latest: _Arrived, kept: _Arrived, recent: _Totals, history: _Totals
) -> tuple[float | None, float | None, str]:
    """(prompt tokens computed per request, output tokens per request, where they come from): those of the
    `latest` arrivals when what was `kept` calibrates them (see the module's doc), else those of the requests
    finished in the window (`recent`)."""
    prompt, output = recent.prompt_tokens(), recent.output_tokens()
    sources = []
    if (
        latest.prompted > 0
        and kept.prompted >= CALIBRATION_REQUESTS
        and kept.prompt_tokens > 0
        and history.computed > 0
    ):
        computed_per_counted = history.computed / kept.prompt_tokens
        prompt = latest.prompt_tokens / latest.prompted * computed_per_counted
        sources.append(f"prompts on arrival (×{computed_per_counted:.2f} computed per token counted)")
    generated = _ratio(history.output_sum, history.output_count)
    asked = _ratio(history.max_tokens_sum, history.max_tokens_count)
    if (
        latest.prompted > 0
        and latest.max_stated >= STATED_SHARE * latest.prompted
        and history.output_count >= CALIBRATION_REQUESTS
        and generated is not None
        and asked
    ):
        answered_share = generated / asked
        output = latest.max_tokens / latest.max_stated * answered_share
        sources.append(f"answers on arrival (×{answered_share:.2f} of max_tokens generated)")
    return prompt, output, "; ".join(sources) or "sizes from finished requests"


def window_figures(
    readings: Sequence[Reading],
    itl_objective_s: float,
    counts: dict[PlannedRole, int],
    active: dict[PlannedRole, int],
    changing: str | None = None,
    window_s: float = math.inf,
) -> Figures:
    """The figures of `readings` (oldest first) for a job running `counts` (`active` of them routable): the
    traffic over the last `window_s` of them, the capacities over all of them (a capacity belongs to the
    engines, not to the traffic of the moment: a longer history holds more batch sizes to fit the step on)."""
    if len(readings) < 2:
        return Figures(counts=counts, active=active, changing=changing)
    since = readings[-1].at - window_s
    totals, history = _Totals(), _Totals()
    busy: list[tuple[float, float]] = []
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
                if computed > 0 and _queued(then) and _queued(now):
                    busy.append((computed, seconds))
                history.computed += computed
                if before.at < since:
                    continue
                totals.computed += computed
                totals.prefill_finished += now.finished - then.finished
                totals.computed_sum += now.computed_sum - then.computed_sum
                totals.computed_count += now.computed_count - then.computed_count
            elif now.role == "decode":
                generated = now.generated - then.generated
                sample = _decode_sample(then, now, seconds)
                if sample is not None:
                    decode_samples.append(sample)
                history.output_sum += now.output_sum - then.output_sum
                history.output_count += now.output_count - then.output_count
                history.max_tokens_sum += now.max_tokens_sum - then.max_tokens_sum
                history.max_tokens_count += now.max_tokens_count - then.max_tokens_count
                if before.at < since:
                    continue
                totals.generated += generated
                totals.decode_finished += now.finished - then.finished
                totals.output_sum += now.output_sum - then.output_sum
                totals.output_count += now.output_count - then.output_count
    last = readings[-1]
    window = [reading for reading in readings if reading.at >= since]
    latest = _arrived(window, enough=SIZE_REQUESTS)
    prompt_tokens, output_tokens, sizes = _sizes(latest, _arrived(readings), totals, history)
    prefill_rate, prefill_note = prefill_capacity(
        busy,
        [rate for instance, rate in last.prefill_rates.items() if _role(last, instance) == "prefill"],
    )
    decode = decode_capacity(decode_samples, itl_objective_s)
    recent = [reading for reading in readings if reading.at >= last.at - BACKLOG_S]
    queued_tokens = statistics.fmean(
        sum(_queued_tokens(e, prompt_tokens) for e in reading.engines.values() if e.role == "prefill")
        for reading in recent
    )
    decode_sequences = statistics.fmean(
        sum(e.running + e.waiting for e in reading.engines.values() if e.role == "decode")
        for reading in recent
    )
    return Figures(
        counts=counts,
        active=active,
        arrival_rate=_arrival_rate(window),
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        prefill_tokens_per_s=prefill_rate,
        decode_tokens_per_s=decode.tokens_per_s if decode else None,
        decode_batch=decode.batch if decode else None,
        prefill_queued_tokens=queued_tokens,
        decode_sequences=decode_sequences,
        changing=changing,
        notes=(prefill_note, decode.describe() if decode else "decode capacity not measured yet", sizes),
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


def _decode_sample(then: EngineReading, now: EngineReading, seconds: float) -> DecodeSample | None:
    """One decode engine over one interval: from its step histograms (the output tokens of running sequences
    per step, the mean seconds before each), else from its running gauge at both ends and its tokens."""
    kv_usage = (then.kv_usage + now.kv_usage) / 2
    steps, tokens = now.steps - then.steps, now.itl_count - then.itl_count
    if steps > 0 and tokens > 0:
        return DecodeSample(tokens / steps, (now.itl_sum - then.itl_sum) / tokens, kv_usage, tokens)
    generated = now.generated - then.generated
    if now.steps > 0 or generated <= 0:  # an engine with step histograms that did not step
        return None
    batch = (then.running + now.running) / 2
    return DecodeSample(batch, batch * seconds / generated, kv_usage, generated)


def _counting_up(then: EngineReading, now: EngineReading) -> bool:
    return (
        now.prompt_computed >= then.prompt_computed
        and now.generated >= then.generated
        and now.finished >= then.finished
        and now.output_count >= then.output_count
        and now.max_tokens_count >= then.max_tokens_count
        and now.computed_count >= then.computed_count
        and now.steps >= then.steps
        and now.itl_count >= then.itl_count
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
