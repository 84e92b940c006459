"""The capacity model's formulas, its KV-block budget and its command-line flags."""

import json

import pytest

from motor.engine.sim.capacity import CapacityModel, blocks_for
from motor.engine.sim.cli import capacity_flags, parse_config
from motor.engine.sim.kv_budget import BlockHolding, KvBlockBudget


def test_step_time_is_overhead_plus_batch_plus_context_plus_prefill_tokens() -> None:
    model = CapacityModel(
        prefill_tokens_per_s=10_000, step_overhead_ms=4, decode_ms_per_seq=0.5, decode_ms_per_1k_context=0.25
    )
    assert model.step_seconds(prefill_tokens=0, decode_seqs=0, context_tokens=0) == 0
    assert model.step_seconds(prefill_tokens=2000, decode_seqs=0, context_tokens=0) == pytest.approx(
        0.004 + 0.2
    )
    assert model.step_seconds(prefill_tokens=0, decode_seqs=8, context_tokens=16_000) == pytest.approx(
        (4 + 0.5 * 8 + 0.25 * 16) / 1000
    )
    assert model.step_seconds(prefill_tokens=500, decode_seqs=2, context_tokens=1000) == pytest.approx(
        (4 + 1 + 0.25) / 1000 + 0.05
    )


def test_zero_rates_cost_nothing() -> None:
    model = CapacityModel(
        prefill_tokens_per_s=0, step_overhead_ms=0, kv_link_gb_per_s=0, kv_transfer_latency_ms=0
    )
    assert model.step_seconds(prefill_tokens=100_000, decode_seqs=0, context_tokens=0) == 0
    assert model.transfer_seconds(100_000) == 0 and model.link_seconds(100_000) == 0


def test_transfer_time_is_latency_plus_bytes_over_bandwidth() -> None:
    model = CapacityModel(kv_link_gb_per_s=10, kv_transfer_latency_ms=1, kv_transfer_bytes_per_token=131072)
    assert model.link_seconds(1000) == pytest.approx(131_072_000 / 10e9)
    assert model.transfer_seconds(1000) == pytest.approx(0.001 + 0.0131072)
    assert model.transfer_seconds(0) == 0


def test_blocks_for_rounds_up() -> None:
    assert [blocks_for(tokens, 16) for tokens in (0, 1, 16, 17, 32, 33)] == [0, 1, 1, 2, 2, 3]


def test_budget_counts_shared_prefix_blocks_once_and_frees_them_with_the_last_holder() -> None:
    budget = KvBlockBudget(10)
    first = BlockHolding(shared=(b"a", b"b"))
    second = BlockHolding(shared=(b"a", b"b"))
    assert budget.grow_to(first, 4) and budget.used == 4
    assert budget.grow_to(second, 3) and budget.used == 5  # only its one private block is new
    assert budget.usage() == pytest.approx(0.5)
    budget.release(first)
    assert budget.used == 3  # the shared blocks stay while the second one holds them
    budget.release(second)
    assert budget.used == 0 and budget.free == 10


def test_budget_refuses_growth_beyond_its_blocks_without_changing_anything() -> None:
    budget = KvBlockBudget(4)
    holding = BlockHolding(shared=(b"x",))
    assert budget.grow_to(holding, 3)
    other = BlockHolding()
    assert not budget.grow_to(other, 2)
    assert other.private == 0 and budget.used == 3
    assert budget.grow_to(holding, 4) and not budget.grow_to(holding, 5)
    assert holding.total == 4 and budget.free == 0
    assert budget.grow_to(holding, 2) and holding.total == 4  # never shrinks


def test_capacity_flags_build_the_model_and_it_is_off_by_default() -> None:
    assert not parse_config([], environ={}).capacity.enabled
    config = parse_config(
        [
            "--capacity-model",
            "--prefill-tokens-per-s",
            "5000",
            "--max-num-batched-tokens",
            "512",
            "--step-overhead-ms",
            "7",
            "--decode-ms-per-seq",
            "0.2",
            "--decode-ms-per-1k-context",
            "0.1",
            "--kv-link-gb-per-s",
            "25",
            "--kv-transfer-latency-ms",
            "0.5",
            "--kv-transfer-bytes-per-token",
            "65536",
            "--no-kv-preemption",
        ],
        environ={},
    )
    assert config.capacity == CapacityModel(
        enabled=True,
        prefill_tokens_per_s=5000,
        max_num_batched_tokens=512,
        step_overhead_ms=7,
        decode_ms_per_seq=0.2,
        decode_ms_per_1k_context=0.1,
        kv_link_gb_per_s=25,
        kv_transfer_latency_ms=0.5,
        kv_transfer_bytes_per_token=65536,
        preemption=False,
    )
    defaults = parse_config(["--capacity-model"], environ={}).capacity
    assert defaults == CapacityModel(enabled=True)


def test_virtual_engines_name_each_engine_and_label_its_metrics() -> None:
    transfer = json.dumps({"kv_role": "kv_producer", "engine_id": "prefill"})
    config = parse_config(["--virtual-engines", "3", "--kv-transfer-config", transfer], environ={})
    assert config.virtual_engines == 3
    engines = [config.virtual_engine(index, 9000 + index) for index in range(3)]
    assert [(e.engine_id, e.port, e.engine_index) for e in engines] == [
        ("prefill-0", 9000, 0),
        ("prefill-1", 9001, 1),
        ("prefill-2", 9002, 2),
    ]
    unnamed = parse_config(["--virtual-engines", "2"], environ={}).virtual_engine(1, 9101)
    assert unnamed.engine_id == "sim-127.0.0.1-9101"


def test_capacity_flags_render_a_model_that_parses_back_to_itself() -> None:
    for model in (
        CapacityModel(enabled=True),
        CapacityModel.free(),
        CapacityModel(enabled=True, preemption=False),
    ):
        assert parse_config(capacity_flags(model), environ={}).capacity == model
    assert capacity_flags(CapacityModel()) == []
