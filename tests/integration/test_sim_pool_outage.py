"""A pool outage costs hit ratio, never answers: sim engines whose `mooncake_master` is killed keep answering
every request with the right tokens (KV computed instead of fetched, no wait for manifests that cannot come),
their metrics show the outage, and once a master serves the same address again the pool is used again. An
engine started while the master is down serves without the pool and connects when it comes up."""

import asyncio
import os
import signal
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx

from motor.pool.master import MooncakeMaster
from tests.fixtures.pool import RunningPool, StartPool
from tests.fixtures.sim import SimEngine, StartSimEngine, expected_tokens, fresh_prompt, start_ready_together

# A decode waiting for a manifest would wait this long; requests must end far sooner than that.
KV_WAIT_TIMEOUT_S = 60.0
CLIENT_TIMEOUT_S = 20.0
FIELDS = {"max_tokens": 6, "seed": 7, "temperature": 1.0, "ignore_eos": True, "return_token_ids": True}


def metric(engine: SimEngine, name: str) -> float:
    for line in httpx.get(f"{engine.base_url}/metrics", timeout=10).text.splitlines():
        if line.split("{", 1)[0] == name:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not exported by {engine.engine_id}")


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout:g} s: {what}"
        time.sleep(0.1)


async def pd_request(
    http: httpx.AsyncClient, prefill: SimEngine, decode: SimEngine, prompt: str, *, concurrent: bool
) -> None:
    """One request through both legs, checking the decode's tokens against the oracle. `concurrent`: both legs
    at once, the decode waiting for the prefill's manifest in the pool (the `concurrent` profile); else the
    prefill first, the decode given the block keys it answered with (`prefill_first`, examples/sim's)."""
    body: dict[str, Any] = {"prompt": prompt, **FIELDS}
    prefill_body = body | {"max_tokens": 1, "kv_transfer_params": {"do_remote_decode": True}}
    if concurrent:
        transfer_id = uuid.uuid4().hex
        prefill_body["kv_transfer_params"]["transfer_id"] = transfer_id
        prefilled, decoded = await asyncio.gather(
            http.post(f"{prefill.base_url}/v1/completions", json=prefill_body),
            http.post(
                f"{decode.base_url}/v1/completions",
                json=body | {"kv_transfer_params": {"do_remote_prefill": True, "transfer_id": transfer_id}},
            ),
        )
        assert prefilled.status_code == 200, prefilled.text
    else:
        prefilled = await http.post(f"{prefill.base_url}/v1/completions", json=prefill_body)
        assert prefilled.status_code == 200, prefilled.text
        params = prefilled.json()["kv_transfer_params"]
        decoded = await http.post(
            f"{decode.base_url}/v1/completions", json=body | {"kv_transfer_params": params}
        )
    assert decoded.status_code == 200, decoded.text
    choice = decoded.json()["choices"][0]
    assert choice["token_ids"] == expected_tokens(
        choice["prompt_token_ids"], max_tokens=6, seed=7, ignore_eos=True
    )


async def serve(
    prefill: SimEngine, decode: SimEngine, prompts: list[str], *, concurrent: bool = False
) -> None:
    async with httpx.AsyncClient(timeout=CLIENT_TIMEOUT_S) as http:
        await asyncio.gather(
            *(pd_request(http, prefill, decode, prompt, concurrent=concurrent) for prompt in prompts)
        )


def pair(sim_engines: StartSimEngine, store: dict[str, Any], *, wait: bool = True) -> list[SimEngine]:
    no_local_cache = ["--no-enable-prefix-caching"]  # so that repeated prompts come from the pool
    engines = [
        {
            "kv_role": "kv_producer",
            "engine_id": "prefill-0",
            "store_config": store,
            "extra_args": no_local_cache,
        },
        {
            "kv_role": "kv_consumer",
            "engine_id": "decode-0",
            "store_config": store,
            "extra_args": [*no_local_cache, "--kv-wait-timeout-s", str(KV_WAIT_TIMEOUT_S)],
        },
    ]
    return start_ready_together(sim_engines, *engines)


def restart(master: MooncakeMaster) -> None:
    wait_for(lambda: not master.running, 10, "the killed master reaped")
    master.start()


async def test_a_killed_master_costs_hits_not_answers_and_the_pool_is_used_again(
    mooncake_master: RunningPool, sim_engines: StartSimEngine
) -> None:
    prefill, decode = pair(sim_engines, mooncake_master.store_config)
    shared = fresh_prompt(64)
    await serve(prefill, decode, [shared])
    await serve(prefill, decode, [shared], concurrent=True)
    assert metric(decode, "vllm:external_prefix_cache_hits_total") > 0
    assert metric(prefill, "motor_sim_kv_pool_up") == 1.0

    assert mooncake_master.master.pid is not None
    os.kill(mooncake_master.master.pid, signal.SIGKILL)
    # Before the fix each store call blocked 4-9 s in Mooncake's reconnect loop on one of 4 threads, and every
    # decode waited for a manifest until its kv-wait timeout: 40 requests would take minutes, not seconds.
    prompts = [shared if i % 2 else fresh_prompt(64) for i in range(40)]
    await serve(prefill, decode, prompts[:20])
    await serve(prefill, decode, prompts[20:], concurrent=True)
    for engine in (prefill, decode):
        assert metric(engine, "motor_sim_kv_pool_up") == 0.0
        assert metric(engine, "motor_sim_kv_pool_outages_total") == 1.0
        assert metric(engine, "motor_sim_kv_pool_unavailable_total") > 0
        assert metric(engine, "motor_sim_kv_pool_down_seconds_total") > 0
        assert engine.exit_code() is None

    await asyncio.to_thread(restart, mooncake_master.master)
    fetched_before = metric(decode, "motor_sim_kv_blocks_fetched_total")

    def pool_used_again() -> bool:
        prompt = fresh_prompt(64)
        asyncio.run(serve(prefill, decode, [prompt, prompt]))
        return metric(decode, "motor_sim_kv_blocks_fetched_total") > fetched_before

    await asyncio.to_thread(
        wait_for, pool_used_again, 60, "the decode reads blocks from the restarted master"
    )
    for engine in (prefill, decode):
        assert metric(engine, "motor_sim_kv_pool_up") == 1.0
    assert mooncake_master.snapshot().key_count > 0


async def test_an_engine_started_while_the_master_is_down_connects_when_it_comes_up(
    start_mooncake_master: StartPool, sim_engines: StartSimEngine
) -> None:
    pool = start_mooncake_master()
    pool.master.stop()
    prefill, decode = pair(sim_engines, pool.store_config)
    await serve(prefill, decode, [fresh_prompt(64) for _ in range(4)])
    assert metric(prefill, "motor_sim_kv_pool_up") == 0.0
    assert metric(prefill, "motor_sim_kv_blocks_written_total") == 0.0

    await asyncio.to_thread(pool.master.start)

    def connected() -> bool:
        asyncio.run(serve(prefill, decode, [fresh_prompt(64)]))
        return metric(prefill, "motor_sim_kv_blocks_written_total") > 0

    await asyncio.to_thread(wait_for, connected, 60, "the prefill writes blocks once the master is up")
    assert "KV pool connected" in prefill.log_text()
    assert metric(prefill, "motor_sim_kv_pool_up") == 1.0
