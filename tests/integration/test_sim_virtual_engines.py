"""One sim process serving several virtual engines, each on its own port with its own state, and the capacity
model's KV budget queueing requests in a real process."""

import asyncio
import re
import time

import httpx

from motor.engine.sim.capacity import CapacityModel
from motor.engine.sim.cli import capacity_flags
from motor.tokenize.sim_vocab import encode
from tests.fixtures.pool import RunningPool
from tests.fixtures.sim import (
    SIM_ADMIN,
    SimEngine,
    StartSimEngine,
    expected_tokens,
    fresh_prompt,
    start_ready_together,
)

_LISTENING = re.compile(
    r"motor-sim listening on http://127\.0\.0\.1:(\d+) \(virtual engine (\d+), engine_id (\S+)\)"
)
FREE_MODEL = capacity_flags(CapacityModel.free())  # steps cost nothing: requests run as fast as served


def engine_urls(process: SimEngine, count: int) -> list[tuple[str, str]]:
    """(base URL, engine id) of each virtual engine, in index order, from the process's log."""
    found = {
        int(index): (f"http://127.0.0.1:{port}", engine_id)
        for port, index, engine_id in _LISTENING.findall(process.log_text())
    }
    assert sorted(found) == list(range(count)), process.log_text()[-2000:]
    return [found[index] for index in range(count)]


def metric(text: str, name: str, engine: int) -> float:
    match = re.search(
        rf'^{re.escape(name)}{{engine="{engine}",model_name="sim-model"}} (\S+)$', text, re.MULTILINE
    )
    assert match is not None, f"{name} for engine {engine} not in:\n{text}"
    return float(match.group(1))


def test_each_virtual_engine_answers_on_its_port_with_its_own_state(sim_engines: StartSimEngine) -> None:
    process = sim_engines(engine_id="virt", extra_args=["--virtual-engines", "3", *FREE_MODEL])
    engines = engine_urls(process, 3)
    assert [engine_id for _, engine_id in engines] == ["virt-0", "virt-1", "virt-2"]
    assert "3 virtual engines" in process.log_text() and "SIMULATOR" in process.log_text()

    prompt = fresh_prompt()
    body = {"model": "sim-model", "prompt": prompt, "max_tokens": 6, "seed": 5, "ignore_eos": True}
    for index, (url, engine_id) in enumerate(engines):
        assert httpx.get(f"{url}/v1/models").json()["data"][0]["id"] == "sim-model"
        # only engine 1 sees the request twice: its own prefix cache, nobody else's
        for _ in range(2 if index == 1 else 1):
            answer = httpx.post(f"{url}/v1/completions", json={**body, "return_token_ids": True}).json()
            tokens = answer["choices"][0]["token_ids"]
            assert tokens == expected_tokens(encode(prompt), max_tokens=6, seed=5, ignore_eos=True)
        leg = httpx.post(
            f"{url}/v1/completions",
            json={**body, "max_tokens": 1, "kv_transfer_params": {"do_remote_decode": True}},
        ).json()["kv_transfer_params"]
        assert (leg["remote_engine_id"], leg["remote_port"]) == (engine_id, int(url.rsplit(":", 1)[1]))

    for index, (url, _) in enumerate(engines):
        text = httpx.get(f"{url}/metrics").text
        assert f'engine="{index}"' in text and f'engine="{(index + 1) % 3}"' not in text
        assert metric(text, "vllm:generation_tokens_total", index) == (6 * 2 + 1 if index == 1 else 6 + 1)
        # the prefill leg repeats the prompt: 2 shareable blocks hit on every engine, twice on engine 1
        assert metric(text, "vllm:prefix_cache_hits_total", index) == (64 if index == 1 else 32)
        for gauge in (
            "vllm:num_requests_running",
            "vllm:num_requests_waiting",
            "motor_sim_queued_prefill_tokens",
        ):
            assert metric(text, gauge, index) == 0
        assert metric(text, "vllm:num_preemptions_total", index) == 0

    # faults are per engine too
    faults = httpx.post(f"{engines[2][0]}/admin/faults", json={"health_down": True}, headers=SIM_ADMIN)
    assert faults.status_code == 200
    assert [httpx.get(f"{url}/health").status_code for url, _ in engines] == [200, 200, 503]


async def test_a_full_kv_budget_queues_requests_on_that_engine_only(sim_engines: StartSimEngine) -> None:
    # 8 blocks of 16 tokens; without preemption each request reserves its prompt (56 tokens) + 8 = 4 blocks, so
    # two run and the third waits. Steps of 200 ms keep them in flight long enough to be seen.
    process = sim_engines(
        extra_args=[
            "--virtual-engines",
            "2",
            *FREE_MODEL,
            "--step-overhead-ms",
            "200",
            "--num-gpu-blocks-override",
            "8",
            "--max-model-len",
            "128",
            "--no-kv-preemption",
        ]
    )
    (busy, _), (idle, _) = engine_urls(process, 2)
    prompts = [fresh_prompt(56) for _ in range(3)]
    assert all(len(encode(prompt)) == 56 for prompt in prompts)
    async with httpx.AsyncClient(timeout=30) as client:

        async def complete(prompt: str) -> list[int]:
            body = {
                "prompt": prompt,
                "max_tokens": 8,
                "ignore_eos": True,
                "seed": 1,
                "return_token_ids": True,
            }
            response = await client.post(f"{busy}/v1/completions", json=body)
            assert response.status_code == 200, response.text
            return response.json()["choices"][0]["token_ids"]

        requests = [asyncio.ensure_future(complete(prompt)) for prompt in prompts]
        seen = None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not all(request.done() for request in requests):
            text = (await client.get(f"{busy}/metrics")).text
            state = tuple(
                metric(text, name, 0)
                for name in (
                    "vllm:num_requests_running",
                    "vllm:num_requests_waiting",
                    "vllm:kv_cache_usage_perc",
                )
            )
            if state == (2, 1, 1.0):
                seen = text
                break
            await asyncio.sleep(0.02)
        assert seen is not None, "never saw two requests running and one waiting for KV blocks"
        assert metric(seen, "motor_sim_queued_prefill_tokens", 0) >= 56
        idle_text = (await client.get(f"{idle}/metrics")).text
        assert (
            metric(idle_text, "vllm:num_requests_running", 1)
            == metric(idle_text, "vllm:kv_cache_usage_perc", 1)
            == 0
        )
        outputs = await asyncio.gather(*requests)
    for prompt, output in zip(prompts, outputs, strict=True):
        assert output == expected_tokens(encode(prompt), max_tokens=8, seed=1, ignore_eos=True)
    text = httpx.get(f"{busy}/metrics").text
    assert metric(text, "vllm:num_requests_waiting", 0) == metric(text, "vllm:kv_cache_usage_perc", 0) == 0
    assert metric(text, "vllm:num_preemptions_total", 0) == 0


async def test_virtual_prefill_and_decode_engines_hand_kv_over_through_one_store_client_each(
    mooncake_master: RunningPool, sim_engines: StartSimEngine
) -> None:
    """Two processes (P and D) of two virtual engines each share the pool; D's engine pays the KV transfer
    (400 ms of latency here) waiting, with its blocks reserved, before it computes anything."""
    store = mooncake_master.store_config
    p_process, d_process = start_ready_together(
        sim_engines,
        {
            "kv_role": "kv_producer",
            "engine_id": "prefill",
            "store_config": store,
            "extra_args": ["--virtual-engines", "2", *FREE_MODEL],
        },
        {
            "kv_role": "kv_consumer",
            "engine_id": "decode",
            "store_config": store,
            "extra_args": ["--virtual-engines", "2", *FREE_MODEL, "--kv-transfer-latency-ms", "400"],
        },
    )
    prefill = engine_urls(p_process, 2)
    decode = engine_urls(d_process, 2)
    prompt = fresh_prompt()
    body = {"prompt": prompt, "max_tokens": 5, "seed": 2, "ignore_eos": True, "return_token_ids": True}
    async with httpx.AsyncClient(timeout=30) as client:
        leg = {**body, "max_tokens": 1, "kv_transfer_params": {"do_remote_decode": True}}
        params = (await client.post(f"{prefill[1][0]}/v1/completions", json=leg)).json()["kv_transfer_params"]
        assert params["remote_engine_id"] == "prefill-1" and "kv_error" not in params
        shareable = len(params["remote_block_keys"])
        assert shareable == (len(encode(prompt)) - 1) // 16

        url = decode[1][0]
        answer = asyncio.ensure_future(
            client.post(f"{url}/v1/completions", json={**body, "kv_transfer_params": params})
        )
        seen = None
        while not answer.done():
            text = (await client.get(f"{url}/metrics")).text
            if (
                metric(text, "vllm:num_requests_waiting", 1) == 1
                and metric(text, "vllm:kv_cache_usage_perc", 1) > 0
            ):
                seen = text
                break
            await asyncio.sleep(0.02)
        assert seen is not None, "the decode never waited for its KV with blocks reserved"
        assert metric(seen, "vllm:num_requests_running", 1) == 0
        response = await answer
        assert response.status_code == 200, response.text
        assert response.json()["choices"][0]["token_ids"] == expected_tokens(
            encode(prompt), max_tokens=5, seed=2, ignore_eos=True
        )
        source = 'vllm:prompt_tokens_by_source_total{engine="1",model_name="sim-model",source="external_kv_transfer"}'
        assert f"{source} {float(shareable * 16)}" in (await client.get(f"{url}/metrics")).text
        untouched = (await client.get(f"{decode[0][0]}/metrics")).text
        assert metric(untouched, "vllm:prompt_tokens_total", 0) == 0
    assert d_process.log_text().count("KV pool: mooncake_master") == 1
