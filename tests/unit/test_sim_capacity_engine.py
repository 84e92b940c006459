"""The engine in process with the capacity model: the same tokens as the latency model (the oracle), under
preemption too; the KV budget queues; failures of the step loop reach the requests instead of hanging them.

Models here either cost nothing (everything runs at once) or cost a second per step, so that the state can be
inspected while the first step is still "computing"; no assertion depends on how fast anything runs.
"""

import asyncio
from dataclasses import replace

import pytest

from motor.engine.sim.capacity import CapacityModel
from motor.engine.sim.errors import SimError
from motor.engine.sim.latency import LatencyModel
from motor.engine.sim.step_loop import StepLoop
from motor.engine.sim.step_scheduler import ScheduledSequence, StepScheduler
from tests.fixtures.sim import expected_tokens
from tests.unit.test_sim_engine import PROMPT, make_engine, request, run

FREE = CapacityModel.free()
SLOW = replace(FREE, step_overhead_ms=1000)


async def settle() -> None:
    """Let every ready task run until it waits for something (a step, a token)."""
    for _ in range(50):
        await asyncio.sleep(0)


async def test_tokens_match_the_oracle_and_the_prefix_cache_still_hits() -> None:
    engine, metrics, _ = make_engine(capacity=FREE)
    first = request(seed=3, max_tokens=12, ignore_eos=True)
    assert await run(engine, first) == expected_tokens(PROMPT, max_tokens=12, seed=3, ignore_eos=True)
    assert first.finish_reason == "length"
    again = request(seed=3, max_tokens=12, ignore_eos=True)
    assert await run(engine, again) == first.output_token_ids
    assert (first.cached_tokens, again.cached_tokens) == (0, 32)
    assert metrics.generation_tokens == 24 and metrics.finished["length"] == 2
    assert (engine.num_running, engine.num_waiting, engine.kv_cache_usage()) == (0, 0, 0.0)


async def test_preempted_requests_still_produce_the_oracle_tokens() -> None:
    # 10 blocks of 16 tokens; each request grows to 40 + 60 tokens = 7 blocks, so they preempt each other
    engine, metrics, _ = make_engine(capacity=FREE, num_kv_blocks=10)
    prompts = [[*PROMPT[:-1], 1000 + index] for index in range(4)]
    seqs = [
        request(prompt, seed=index, max_tokens=60, ignore_eos=True) for index, prompt in enumerate(prompts)
    ]
    outputs = await asyncio.gather(*(run(engine, seq) for seq in seqs))
    for index, (prompt, output) in enumerate(zip(prompts, outputs, strict=True)):
        assert output == expected_tokens(prompt, max_tokens=60, seed=index, ignore_eos=True)
    assert engine.num_preemptions > 0
    assert metrics.finished["length"] == 4 and engine.kv_cache_usage() == 0.0


async def test_a_full_kv_budget_makes_the_next_request_wait() -> None:
    # without preemption a request reserves prompt + max_tokens: 40 + 24 tokens = 4 of the 6 blocks
    engine, _, _ = make_engine(capacity=replace(SLOW, preemption=False), num_kv_blocks=6)
    first = engine.generate(request(max_tokens=24))
    second = engine.generate(request(list(range(200, 240)), max_tokens=24))  # no prefix in common
    pending = [asyncio.ensure_future(anext(first)), asyncio.ensure_future(anext(second))]
    await settle()
    assert (engine.num_running, engine.num_waiting) == (1, 1)
    assert engine.kv_cache_usage() == pytest.approx(4 / 6)
    # the running prompt's 40 tokens are in the step being computed; the waiting one's 40 are queued
    assert engine.queued_prefill_tokens() == 80
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    await first.aclose()
    await second.aclose()
    assert (engine.num_running, engine.num_waiting, engine.kv_cache_usage()) == (0, 0, 0.0)
    await engine.close()


async def test_prompt_tokens_are_counted_once_computed_as_vllm_counts_them() -> None:
    # a reader of the counters over an interval (the planner's prefill capacity) must see what was computed in
    # it, not what arrived: vLLM counts a prompt's tokens with its first output
    engine, metrics, _ = make_engine(capacity=SLOW)
    tokens = engine.generate(request(max_tokens=2))
    first = asyncio.ensure_future(anext(tokens))
    await settle()
    assert engine.queued_prefill_tokens() == len(PROMPT)
    assert metrics.prompt_tokens == metrics.prompt_tokens_by_source["local_compute"] == 0
    await first
    assert metrics.prompt_tokens == metrics.prompt_tokens_by_source["local_compute"] == len(PROMPT)
    await tokens.aclose()
    await engine.close()


async def test_a_request_that_can_never_fit_is_refused_with_400() -> None:
    engine, metrics, _ = make_engine(capacity=FREE, num_kv_blocks=2)
    with pytest.raises(SimError) as error:
        await run(engine, request(max_tokens=8))
    assert error.value.status == 400 and "needs 3 KV blocks" in error.value.message
    assert metrics.finished["error"] == 1


async def test_closing_the_engine_answers_held_requests_with_503() -> None:
    engine, _, _ = make_engine(capacity=SLOW)
    held = asyncio.ensure_future(run(engine, request()))
    await settle()
    await engine.close()
    with pytest.raises(SimError) as error:
        await held
    assert error.value.status == 503


async def test_a_failing_step_loop_fails_every_sequence_it_holds() -> None:
    scheduler = StepScheduler(FREE, num_blocks=100, block_size=16, max_num_seqs=8)
    loop = StepLoop(scheduler, slowdown=lambda: 1.0)
    failures: list[BaseException] = []

    def broken() -> bool:
        raise RuntimeError("bug in a token callback")

    loop.submit(ScheduledSequence(broken, prompt_tokens=10, max_tokens=4, on_failure=failures.append))
    loop.submit(ScheduledSequence(lambda: False, prompt_tokens=10, max_tokens=4, on_failure=failures.append))
    await settle()
    assert len(failures) == 2 and all("bug in a token callback" in str(exc) for exc in failures)
    assert scheduler.num_running == scheduler.num_waiting == 0


async def test_without_the_capacity_model_queued_prefill_tokens_are_the_ones_being_prefilled() -> None:
    engine, _, _ = make_engine(latency=LatencyModel(prefill_ms_per_token=100))
    pending = asyncio.ensure_future(run(engine, request()))
    await settle()
    assert engine.queued_prefill_tokens() == len(PROMPT)
    pending.cancel()
    await asyncio.gather(pending, return_exceptions=True)
    assert engine.queued_prefill_tokens() == 0
