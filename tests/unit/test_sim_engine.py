"""The engine in process, without a pool: batching, prefix cache, sampling rules, aborts and KV hand-over replies."""

import asyncio
import contextlib

import pytest

from motor.engine.sim.capacity import CapacityModel
from motor.engine.sim.config import SimConfig
from motor.engine.sim.engine import GenerationRequest, Sequence, SimEngine
from motor.engine.sim.errors import SimError
from motor.engine.sim.faults import FaultInjector, Faults
from motor.engine.sim.metrics import EngineMetrics
from motor.engine.sim.transfer import TransferRequest
from motor.tokenize.sim_vocab import EOS_ID
from tests.fixtures.sim import expected_tokens

PROMPT = list(range(100, 140))  # 40 tokens: 2 shareable blocks of 16, 8 computed every time


def make_engine(**overrides: object) -> tuple[SimEngine, EngineMetrics, FaultInjector]:
    config = SimConfig(**{"served_model_names": ("sim-model",), **overrides})  # type: ignore[arg-type]
    metrics = EngineMetrics()
    faults = FaultInjector(config.faults, seed=0, on_crash=lambda _completed: None)
    return SimEngine(config, pool=None, faults=faults, metrics=metrics), metrics, faults


def request(prompt: list[int] = PROMPT, **fields: object) -> Sequence:
    return Sequence(GenerationRequest(request_id="r", prompt_token_ids=prompt, **{"max_tokens": 8, **fields}))  # type: ignore[arg-type]


async def run(engine: SimEngine, seq: Sequence) -> list[int]:
    return [token async for token, _ in engine.generate(seq)]


async def test_output_matches_the_oracle_and_repeats() -> None:
    engine, _, _ = make_engine()
    first = await run(engine, request(seed=3))
    assert first == expected_tokens(PROMPT, max_tokens=8, seed=3)
    assert await run(engine, request(seed=3)) == first
    assert await run(engine, request(seed=4)) != first


@pytest.mark.parametrize("capacity", [CapacityModel(), CapacityModel.free()], ids=["latency", "capacity"])
async def test_repeated_prefix_hits_the_local_prefix_cache(capacity: CapacityModel) -> None:
    # the capacity model counts a prompt at its first token, after its blocks were computed: they must still
    # count as computed, not as external KV (a benchmark read them as pool hits of engines that never read it)
    engine, metrics, _ = make_engine(capacity=capacity)
    cold = request()
    await run(engine, cold)
    warm = request([*PROMPT[:36], 1, 2, 3, 4])
    await run(engine, warm)
    assert (cold.cached_tokens, warm.cached_tokens) == (0, 32)
    assert metrics.prompt_tokens_by_source == {
        "local_compute": 40 + 8,
        "local_cache_hit": 32,
        "external_kv_transfer": 0,
    }
    assert metrics.prompt_tokens_cached_by_source == {
        "device": 32,
        "host": 0,
        "p2p": 0,
        "disk": 0,
        "external_unspecified": 0,
    }
    assert (metrics.prefix_cache_queries, metrics.prefix_cache_hits) == (80, 32)
    assert metrics.external_prefix_cache_queries == 0
    await engine.close()


async def test_without_prefix_caching_everything_is_computed_with_the_same_tokens() -> None:
    engine, metrics, _ = make_engine(enable_prefix_caching=False)
    first, second = request(), request()
    assert await run(engine, first) == await run(engine, second)
    assert second.cached_tokens == 0 and metrics.prefix_cache_queries == 0


def eos_seed(position: int) -> int:
    """A seed whose greedy-free output on PROMPT hits EOS first at `position`."""
    for seed in range(200_000):
        tokens = expected_tokens(PROMPT, max_tokens=position + 1, seed=seed)
        if len(tokens) == position + 1 and tokens[-1] == EOS_ID:
            return seed
    raise AssertionError("no seed found")


async def test_eos_stops_unless_ignored_and_min_tokens_masks_it() -> None:
    engine, metrics, _ = make_engine()
    seed = eos_seed(2)
    stopped = request(seed=seed, max_tokens=6)
    assert await run(engine, stopped) == expected_tokens(PROMPT, max_tokens=6, seed=seed)
    assert (
        stopped.finish_reason == "stop"
        and stopped.output_token_ids[-1] == EOS_ID
        and len(stopped.output_token_ids) == 3
    )

    ignored = request(seed=seed, max_tokens=6, ignore_eos=True)
    await run(engine, ignored)
    assert (
        ignored.finish_reason == "length"
        and len(ignored.output_token_ids) == 6
        and ignored.output_token_ids[2] == EOS_ID
    )

    masked = request(seed=seed, max_tokens=6, min_tokens=4)
    await run(engine, masked)
    assert EOS_ID not in masked.output_token_ids[:4]
    assert masked.output_token_ids[:2] == stopped.output_token_ids[:2]
    assert metrics.finished["stop"] >= 1 and metrics.finished["length"] >= 1


async def test_max_batch_makes_requests_wait_and_an_abort_frees_the_slot() -> None:
    engine, metrics, _ = make_engine(max_batch=1)
    holder = engine.generate(request(max_tokens=100))
    await anext(holder)
    assert (engine.num_running, engine.num_waiting) == (1, 0)
    assert engine.kv_cache_usage() > 0

    queued = asyncio.ensure_future(run(engine, request(max_tokens=2)))
    for _ in range(10):
        await asyncio.sleep(0)
    assert not queued.done()
    assert (engine.num_running, engine.num_waiting) == (1, 1)

    await holder.aclose()
    assert len(await asyncio.wait_for(queued, 2.0)) == 2
    assert (engine.num_running, engine.num_waiting) == (0, 0)
    assert metrics.finished["abort"] == 1 and metrics.finished["length"] == 1


async def test_cancelling_a_hung_request_counts_an_abort() -> None:
    engine, metrics, _ = make_engine(faults=Faults(hang=True))
    hung = asyncio.ensure_future(run(engine, request()))
    for _ in range(10):
        await asyncio.sleep(0)
    assert engine.num_waiting == 1
    hung.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await hung
    assert engine.num_waiting == 0 and metrics.finished["abort"] == 1


async def test_error_rate_fault_fails_requests_with_500() -> None:
    engine, metrics, _ = make_engine(faults=Faults(error_rate=1.0))
    with pytest.raises(SimError) as error:
        await run(engine, request())
    assert error.value.status == 500 and "error_rate" in error.value.message
    assert metrics.injected_errors == 1 and metrics.finished["error"] == 1


async def test_prefill_leg_without_a_pool_says_there_is_no_kv() -> None:
    engine, _, _ = make_engine(engine_id="p0")
    seq = request(max_tokens=1, transfer=TransferRequest(remote_decode=True))
    await run(engine, seq)
    assert seq.kv_transfer_params is not None
    assert seq.kv_transfer_params["remote_block_keys"] == []
    assert seq.kv_transfer_params["remote_engine_id"] == "p0"
    assert "no KV pool" in seq.kv_transfer_params["kv_error"]


async def test_decode_leg_without_a_pool_recomputes_the_same_tokens() -> None:
    engine, _, _ = make_engine(enable_prefix_caching=False)
    seq = request(seed=1, transfer=TransferRequest(remote_prefill=True, transfer_id="t1"))
    assert await asyncio.wait_for(run(engine, seq), 2.0) == expected_tokens(PROMPT, max_tokens=8, seed=1)
    assert seq.cached_tokens == 0
