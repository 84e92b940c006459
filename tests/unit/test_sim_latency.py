import pytest

from motor.engine.sim.latency import LatencyModel


def test_prefill_is_overhead_plus_uncached_tokens() -> None:
    model = LatencyModel(overhead_ms=5, prefill_ms_per_token=0.5)
    assert model.prefill_seconds(0) == pytest.approx(0.005)
    assert model.prefill_seconds(100) == pytest.approx(0.055)
    assert model.prefill_seconds(100, slowdown=2) == pytest.approx(0.110)


def test_itl_grows_linearly_with_the_batch() -> None:
    model = LatencyModel(itl_ms=10, itl_batch_factor=0.1)
    assert model.inter_token_seconds(1) == pytest.approx(0.010)
    assert model.inter_token_seconds(0) == pytest.approx(0.010)
    assert model.inter_token_seconds(11) == pytest.approx(0.020)
    assert model.inter_token_seconds(11, slowdown=3) == pytest.approx(0.060)


def test_zero_model_costs_nothing() -> None:
    model = LatencyModel()
    assert model.prefill_seconds(10_000, slowdown=100) == 0
    assert model.inter_token_seconds(256, slowdown=100) == 0
