"""The planner's figures from a window of readings, and one instance's capacity from them
(motor/planner/figures.py, capacity.py), on readings made as the sim's capacity model would produce them
(docs/sim-capacity-model.md): a decode step of 5 ms + 12 ms per sequence, prefill at 1,000 tokens/s."""

import pytest

from motor.observability.traffic import CoordinatorSample
from motor.planner.capacity import DecodeSample, decode_capacity, prefill_capacity
from motor.planner.figures import window_figures
from motor.planner.readings import EngineReading, Reading, engine_reading, measured_prefill_rates

COUNTS = {"prefill": 2, "decode": 2}


def step_s(batch: float) -> float:
    return 0.005 + 0.012 * batch


def test_the_step_line_is_fitted_and_gives_the_batch_within_the_objective() -> None:
    samples = [DecodeSample(batch, step_s(batch), 0.1) for batch in (2.0, 4.0, 6.0, 3.0)]
    capacity = decode_capacity(samples, itl_objective_s=0.1)
    assert capacity is not None and capacity.fitted and capacity.limit == "ITL"
    assert capacity.intercept_s == pytest.approx(0.005) and capacity.per_sequence_s == pytest.approx(0.012)
    assert capacity.batch == pytest.approx(95 / 12)
    assert capacity.tokens_per_s == pytest.approx(95 / 12 / 0.1)


def test_kv_blocks_bound_the_batch() -> None:
    samples = [DecodeSample(batch, step_s(batch) / 10, batch / 10) for batch in (2.0, 4.0, 6.0)]
    capacity = decode_capacity(samples, itl_objective_s=0.1)
    assert capacity is not None and capacity.limit == "KV" and capacity.batch == pytest.approx(9.0)


def test_one_batch_size_is_taken_as_proportional_and_says_so() -> None:
    capacity = decode_capacity([DecodeSample(4.0, step_s(4.0), 0.0)] * 3, itl_objective_s=0.1)
    assert capacity is not None and not capacity.fitted
    assert capacity.batch == pytest.approx(0.1 / (step_s(4.0) / 4))  # below the true 7.9: errs to more decode
    assert "taken as proportional" in capacity.describe()


def test_no_decode_step_no_capacity() -> None:
    assert decode_capacity([DecodeSample(0.2, 0.01, 0.0)], 0.1) is None


def test_prefill_capacity_prefers_busy_intervals_then_the_coordinator() -> None:
    assert prefill_capacity([(900.0, 1.0), (2100.0, 2.0)], [700.0])[0] == 1000.0
    rate, note = prefill_capacity([], [700.0, 800.0])
    assert rate == 750.0 and "as the coordinator measured" in note
    assert prefill_capacity([], []) == (None, "prefill capacity not measured yet")


def engine(role: str, **values: float) -> EngineReading:
    base = {"prompt_computed": 0.0, "generated": 0.0, "finished": 0.0, "running": 0.0, "waiting": 0.0}
    base.update(kv_usage=0.1)
    base.update(values)
    return EngineReading(role=role, **base)  # type: ignore[arg-type]


def cluster_readings(seconds: int = 10) -> list[Reading]:
    """Two prefill engines, one kept busy (a queue at every look) at 1,000 tokens/s, the other idle; two decode
    engines holding 3 and 6 sequences; 4 requests/s of 500 computed prompt tokens and 40 output tokens."""
    readings = []
    for t in range(seconds + 1):
        engines = {
            "prefill-0": engine(
                "prefill", prompt_computed=1000.0 * t, finished=2.0 * t, queued_prefill_tokens=800
            ),
            "prefill-1": engine("prefill", prompt_computed=0.0 * t, queued_prefill_tokens=0),
            "decode-0": engine("decode", generated=3 / step_s(3) * t, finished=2.0 * t, running=3.0),
            "decode-1": engine("decode", generated=6 / step_s(6) * t, finished=2.0 * t, running=6.0),
        }
        coordinator = CoordinatorSample(at=float(t), requests=4.0 * t, errors=0.0, in_flight=5.0)
        readings.append(Reading(at=float(t), coordinator=coordinator, engines=engines))
    return readings


def test_window_figures() -> None:
    figures = window_figures(cluster_readings(), 0.1, COUNTS, COUNTS)
    assert figures.arrival_rate == pytest.approx(4.0)
    assert figures.prompt_tokens == pytest.approx(500.0)
    assert figures.prefill_tokens_per_s == pytest.approx(1000.0)
    assert figures.output_tokens == pytest.approx((3 / step_s(3) + 6 / step_s(6)) / 4)
    assert figures.decode_batch == pytest.approx(95 / 12, rel=1e-6)
    assert figures.prefill_queued_tokens == 800 and figures.decode_sequences == 9
    assert "over 10 busy intervals" in figures.notes[0]


def test_a_restarted_engine_or_coordinator_counts_from_its_restart() -> None:
    readings = cluster_readings(4)
    for t in (2, 3, 4):  # prefill-0 restarted just before t = 2: its counters start again from 0
        since = t - 2
        fresh = engine(
            "prefill", prompt_computed=1000.0 * since, finished=2.0 * since, queued_prefill_tokens=800
        )
        readings[t] = Reading(at=float(t), coordinator=readings[t].coordinator, engines={**readings[t].engines,
                              "prefill-0": fresh})  # fmt: skip
    figures = window_figures(readings, 0.1, COUNTS, COUNTS)
    assert figures.prefill_tokens_per_s == pytest.approx(1000.0)  # the interval across the restart skipped
    assert figures.notes[0].endswith("over 3 busy intervals")
    assert figures.prompt_tokens == pytest.approx(500.0)
    readings[-1] = Reading(at=4.0, coordinator=CoordinatorSample(4.0, 1.0, 0.0), engines=readings[-1].engines)
    assert window_figures(readings, 0.1, COUNTS, COUNTS).arrival_rate == pytest.approx(4.0)
    assert window_figures(readings[-2:], 0.1, COUNTS, COUNTS).arrival_rate is None


def test_too_few_readings_measure_nothing() -> None:
    figures = window_figures(cluster_readings(0), 0.1, COUNTS, COUNTS, changing="decode-2 starting")
    assert figures.arrival_rate is None and figures.changing == "decode-2 starting"


SIM_PAGE = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
motor_sim_queued_prefill_tokens{engine="0",model_name="m"} 120.0
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="m"} 77.0
# TYPE vllm:prompt_tokens_by_source counter
vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="local_compute"} 500.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="local_cache_hit"} 300.0
# TYPE vllm:request_params_max_tokens histogram
vllm:request_params_max_tokens_count{engine="0",model_name="m"} 4.0
vllm:request_params_max_tokens_sum{engine="0",model_name="m"} 256.0
# TYPE vllm:request_success counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 2.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 3.0
"""


def test_an_engine_page_is_read_as_vllm_names_it() -> None:
    assert engine_reading("decode", SIM_PAGE) == EngineReading(
        role="decode",
        prompt_computed=500.0,
        generated=77.0,
        finished=5.0,
        running=3.0,
        waiting=1.0,
        kv_usage=0.25,
        queued_prefill_tokens=120.0,
        max_tokens_sum=256.0,
        max_tokens_count=4.0,
    )
    assert engine_reading("decode", "# nothing here\n") is None


def test_the_coordinators_measured_rates_by_instance() -> None:
    body = {
        "endpoint_load": {
            "prefill-0@127.0.0.1:1": {"prefill_tokens_per_second": 950.0},
            "prefill-1@127.0.0.1:2": {"prefill_tokens_per_second": None},
        }
    }
    assert measured_prefill_rates(body) == {"prefill-0": 950.0}


def test_per_request_histograms_win_over_counter_ratios() -> None:
    """Generated tokens include those of requests still running; the histograms count finished requests only."""
    readings = []
    for t in range(5):
        engines = {
            "prefill-0": engine("prefill", prompt_computed=900.0 * t, finished=1.0 * t, computed_sum=500.0 * t,
                                computed_count=1.0 * t),
            "decode-0": engine("decode", generated=100.0 * t, finished=1.0 * t, running=4.0, output_sum=60.0 * t,
                               output_count=1.0 * t),
        }  # fmt: skip
        readings.append(Reading(at=float(t), engines=engines))
    figures = window_figures(readings, 0.1, COUNTS, COUNTS)
    assert (figures.prompt_tokens, figures.output_tokens) == (500.0, 60.0)


def shifting_readings(seconds: int = 20, shift: int = 15, stated: float = 4.0) -> list[Reading]:
    """4 requests/s whose prompts the coordinator counts as 2,000 tokens and whose max_tokens is 32, then from
    `shift` on 100 and 240 (`stated` of the 4 a second say their max_tokens). The prefill engines compute 0.9
    of what the coordinator counted, a second later; the decode engines finish requests of the first kind
    throughout, each generating half its max_tokens (16 of 32)."""
    readings = []
    prompts = [2000.0 if t < shift else 100.0 for t in range(seconds + 1)]
    asks = [32.0 if t < shift else 240.0 for t in range(seconds + 1)]
    for t in range(seconds + 1):
        counted = 4.0 * sum(prompts[:t])
        computed = 0.9 * 4.0 * sum(prompts[: max(t - 1, 0)])
        engines = {
            "prefill-0": engine("prefill", prompt_computed=computed, finished=4.0 * t, computed_sum=computed,
                                computed_count=4.0 * t),
            "decode-0": engine("decode", generated=64.0 * t, finished=4.0 * t, running=4.0, output_sum=64.0 * t,
                               output_count=4.0 * t, max_tokens_sum=128.0 * t, max_tokens_count=4.0 * t),
        }  # fmt: skip
        coordinator = CoordinatorSample(at=float(t), requests=4.0 * t, errors=0.0, prompt_tokens=counted,
                                        prompted=4.0 * t, max_tokens=stated / 4 * sum(asks[:t]) * 4.0,
                                        max_stated=stated * t)  # fmt: skip
        readings.append(Reading(at=float(t), coordinator=coordinator, engines=engines))
    return readings


def test_sizes_come_from_what_arrives_once_calibrated() -> None:
    """The window after the shift holds only the new requests' arrivals, while the engines still finish the old
    ones: the sizes follow the arrivals (× the computed share and the generated share measured over the
    history), not the finished requests."""
    figures = window_figures(shifting_readings(), 0.1, COUNTS, COUNTS, window_s=4.0)
    assert figures.arrival_rate == pytest.approx(4.0)
    computed_share = 0.9 * 4.0 * (2000.0 * 15 + 100.0 * 4) / (4.0 * (2000.0 * 15 + 100.0 * 5))
    assert figures.prompt_tokens == pytest.approx(100.0 * computed_share)
    assert figures.output_tokens == pytest.approx(120.0)  # 240 asked, half of what was asked is generated
    assert (
        "prompts on arrival (×0.90" in figures.notes[-1] and "answers on arrival (×0.50" in figures.notes[-1]
    )
    # over a longer window the sizes are those of the latest 20 arrivals (the 5 s since the shift), the rate
    # the window's
    longer = window_figures(shifting_readings(), 0.1, COUNTS, COUNTS, window_s=8.0)
    assert (longer.prompt_tokens, longer.output_tokens) == (figures.prompt_tokens, figures.output_tokens)
    before = window_figures(shifting_readings()[:15], 0.1, COUNTS, COUNTS, window_s=4.0)
    # the prompts of the last second are not computed yet: the share is low by 1/14 of the history's tokens
    assert before.prompt_tokens == pytest.approx(2000.0 * 0.9 * 13 / 14) and before.output_tokens == 16.0


def test_sizes_come_from_finished_requests_until_calibrated_or_when_arrivals_do_not_say() -> None:
    early = window_figures(shifting_readings()[:4], 0.1, COUNTS, COUNTS)  # 12 requests arrived so far
    assert early.notes[-1] == "sizes from finished requests"
    assert early.output_tokens == pytest.approx(16.0)
    unsaid = window_figures(shifting_readings(stated=3.0), 0.1, COUNTS, COUNTS, window_s=4.0)  # 75 % said
    assert unsaid.output_tokens == pytest.approx(16.0)  # finished requests'
    assert "prompts on arrival" in unsaid.notes[-1] and "answers" not in unsaid.notes[-1]
