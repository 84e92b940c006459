"""The Dynamo peer's calibration: the mocker's timing tables reproduce the sim's capacity model per word.

The mocker (Dynamo 1.6.1) times a pass by interpolating its tables: prefill linearly by the pass's new prompt
tokens, decode bilinearly by (active KV tokens, mean context length), both extrapolating. This test
interpolates the tables the same way and compares with motor's `CapacityModel.step_seconds` for the same work.
"""

import bisect
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from dynamo_peer import perf_tables, role_flags

from motor.engine.sim.capacity import CapacityModel

MODEL = CapacityModel(
    enabled=True,
    prefill_tokens_per_s=1000,
    step_overhead_ms=5,
    decode_ms_per_seq=6,
    decode_ms_per_1k_context=2,
)
RATIO = 3.0  # mocker tokens per sim token
MAX_KV = 1024 * 16 * 3


def linear(xs: list[float], ys: list[float], x: float) -> float:
    i = min(max(bisect.bisect_right(xs, x) - 1, 0), len(xs) - 2)
    return ys[i] + (ys[i + 1] - ys[i]) * (x - xs[i]) / (xs[i + 1] - xs[i])


def bilinear(xs: list[float], ys: list[float], table: list[list[float]], x: float, y: float) -> float:
    i = min(max(bisect.bisect_right(xs, x) - 1, 0), len(xs) - 2)
    column = [linear(ys, table[row], y) for row in (i, i + 1)]
    return column[0] + (column[1] - column[0]) * (x - xs[i]) / (xs[i + 1] - xs[i])


@pytest.fixture(scope="module")
def tables() -> dict[str, list]:
    return perf_tables(MODEL, RATIO, max_prompt_tokens=8192 * 3, max_kv_tokens=MAX_KV)


@pytest.mark.parametrize("words", [1, 100, 2000, 8192])
def test_a_prompt_costs_what_the_sim_charges_for_its_words(tables: dict[str, list], words: int) -> None:
    mocker_ms = linear(tables["prefill_isl"], tables["prefill_ttft_ms"], words * RATIO)
    sim_ms = words / MODEL.prefill_tokens_per_s * 1000
    assert mocker_ms == pytest.approx(sim_ms, rel=1e-6)


BATCHES = [  # (sequences, context words each) that fit in an engine's KV
    (n, words)
    for n in (1, 2, 5, 12, 40)
    for words in (20, 100, 600, 2000, 6000)
    if n * words * RATIO <= MAX_KV
]


@pytest.mark.parametrize(("sequences", "context_words"), BATCHES)
def test_a_decode_step_costs_what_the_sim_charges_for_its_batch(
    tables: dict[str, list], sequences: int, context_words: int
) -> None:
    context = context_words * RATIO
    active = sequences * context
    mocker_ms = bilinear(
        tables["decode_active_kv_tokens"],
        tables["decode_context_length"],
        tables["decode_itl"],
        active,
        context,
    )
    sim_ms = 1000 * MODEL.step_seconds(
        prefill_tokens=0, decode_seqs=sequences, context_tokens=sequences * context_words
    )
    assert mocker_ms == pytest.approx(sim_ms, rel=0.05)


def test_the_decode_table_is_the_formula_on_its_nodes(tables: dict[str, list]) -> None:
    kv, context, itl = (
        tables["decode_active_kv_tokens"],
        tables["decode_context_length"],
        tables["decode_itl"],
    )
    assert len(itl) == len(kv) and all(len(row) == len(context) for row in itl)
    assert kv == sorted(kv) and context == sorted(context)
    assert kv[0] == 0 and math.isclose(kv[-1], MAX_KV)
    lone = itl[kv.index(context[10])][10]  # one sequence of that context
    assert lone == pytest.approx(5 + 6 + 2 * context[10] / RATIO / 1000)


def test_disaggregated_roles_move_kv_over_the_sims_link() -> None:
    prefill = role_flags(MODEL, RATIO, "prefill", workers=2)
    decode = role_flags(MODEL, RATIO, "decode")
    for flags in (prefill, decode):
        assert flags[flags.index("--kv-transfer-bandwidth") + 1] == "10"
        assert int(flags[flags.index("--kv-bytes-per-token") + 1]) == round(131072 / RATIO)
    assert len(prefill[prefill.index("--bootstrap-ports") + 1].split(",")) == 2
    assert "--bootstrap-ports" not in decode
    assert role_flags(MODEL, RATIO, "agg") == []
