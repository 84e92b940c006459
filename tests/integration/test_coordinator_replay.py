"""Replay (`exception_config.reschedule_config`) on a live coordinator in front of PD sim engines: a decode
engine SIGKILLed mid-stream, the client's stream goes on to the end — one id, no token missing or doubled
(the simulator's oracle), usage counting the whole answer, token ids only when the client asked for them."""

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.fixtures.coordinator import (
    CoordinatorProcess,
    StartCoordinator,
    coordinator_metric,
    engine_metric,
    sim_instance,
    sse_chunks,
    wait_engine_idle,
)
from tests.fixtures.pool import RunningPool
from tests.fixtures.sim import SimEngine, StartSimEngine, expected_tokens, fresh_prompt
from tests.integration.test_coordinator_faults import assert_killed

MAX_TOKENS = 48
SEED = 3
REPLAY = {
    "exception_config": {
        "max_retry": 3,
        "retry_delay": 0.05,
        "first_token_timeout": 5,
        "infer_timeout": 60,
        "reschedule_config": {"enable": True},
    },
    "timeout_config": {"request_timeout": 5, "read_timeout": 5, "connection_timeout": 1},
}
RESUMED = 'motor_coordinator_replays_total{outcome="resumed"}'


SAMPLING = {
    "model": "sim-model",
    "max_tokens": MAX_TOKENS,
    "seed": SEED,
    "temperature": 1.0,
    "ignore_eos": True,
    "stream": True,
    "stream_options": {"include_usage": True},
}


def completion(stream_tokens: bool, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {**SAMPLING, "prompt": fresh_prompt(70)}
    if stream_tokens:
        body["return_token_ids"] = True
    return body | extra


def chat(**extra: Any) -> dict[str, Any]:
    return {**SAMPLING, "messages": [{"role": "user", "content": fresh_prompt(70)}]} | extra


class PdCluster:
    def __init__(self, prefill: SimEngine, decodes: list[SimEngine]) -> None:
        self.prefill = prefill
        self.decodes = decodes

    def instances(self) -> list[Any]:
        return [sim_instance(self.prefill, "prefill")] + [sim_instance(d, "decode") for d in self.decodes]

    def streaming_decode(self) -> SimEngine | None:
        for decode in self.decodes:
            if decode.exit_code() is None and engine_metric(decode, "vllm:num_requests_running"):
                return decode
        return None


@pytest.fixture
def cluster(shared_mooncake_master: RunningPool, sim_engines: StartSimEngine) -> Iterator[PdCluster]:
    store = shared_mooncake_master.store_config
    prefill = sim_engines(kv_role="kv_producer", store_config=store)
    # A decode whose KV never lands answers 504 after 3 s rather than holding the replay for the default wait.
    decode_args = ["--kv-wait-timeout-s", "3", "--itl-ms", "40"]
    # The decodes lend the pool no memory: a killed client's segment stays in the master for about 10 s and writes
    # placed there fail (Mooncake -800); the pool client places them again, but that is the pool's recovery
    # (tests/integration/test_pool_store.py), not the replay's.
    reader = {**store, "global_segment_size": 0}
    decodes = [
        sim_engines(kv_role="kv_consumer", store_config=reader, extra_args=decode_args) for _ in range(2)
    ]
    yield PdCluster(prefill, decodes)


def start(coordinators: StartCoordinator, cluster: PdCluster, profile: str) -> CoordinatorProcess:
    coordinator = coordinators(profile=profile, coordinator_config=REPLAY)
    coordinator.register(cluster.instances())
    return coordinator


async def stream_killing_its_decode(
    coordinator: CoordinatorProcess, cluster: PdCluster, path: str, body: dict[str, Any], after: int
) -> tuple[str, SimEngine]:
    """The whole client stream; its decode engine is SIGKILLed once `after` events arrived."""
    killed: SimEngine | None = None
    received = b""
    async with (
        httpx.AsyncClient(base_url=coordinator.base_url, timeout=60) as http,
        http.stream("POST", path, json=body) as response,
    ):
        assert response.status_code == 200
        async for chunk in response.aiter_bytes():
            received += chunk
            if killed is None and received.count(b"data: {") >= after:
                killed = await asyncio.to_thread(cluster.streaming_decode)
                assert killed is not None, "no decode engine was streaming"
                killed.process.kill()
    assert killed is not None, "the stream ended before the kill"
    assert_killed(killed)
    return received.decode(), killed


def whole_stream(text: str) -> list[dict[str, Any]]:
    """The stream's chunks, checked to end normally: no error event, [DONE] last."""
    chunks = sse_chunks(text)
    assert text.endswith("data: [DONE]\n\n") and not [c for c in chunks if "error" in c], text[-600:]
    return chunks


def assert_resumed_once(coordinator: CoordinatorProcess, cluster: PdCluster, killed: SimEngine) -> None:
    """One replay resumed the stream, and the surviving engines hold nothing of it any more."""
    assert coordinator_metric(coordinator, RESUMED) == 1
    for engine in (cluster.prefill, *(d for d in cluster.decodes if d is not killed)):
        wait_engine_idle(engine)


def output_ids(chunks: list[dict[str, Any]]) -> list[int]:
    return [t for c in chunks if c.get("choices") for t in c["choices"][0].get("token_ids") or []]


@pytest.mark.parametrize("profile", ["prefill_first", "decode_first", "concurrent"])
async def test_a_completion_stream_goes_on_when_its_decode_dies(
    cluster: PdCluster, coordinators: StartCoordinator, profile: str
) -> None:
    coordinator = start(coordinators, cluster, profile)
    prefill_hits = engine_metric(cluster.prefill, "vllm:prefix_cache_hits_total")
    body = completion(stream_tokens=True)
    text, killed = await stream_killing_its_decode(coordinator, cluster, "/v1/completions", body, after=6)
    chunks = whole_stream(text)
    prompt_ids = chunks[0]["choices"][0]["prompt_token_ids"]
    assert all("prompt_token_ids" not in c["choices"][0] for c in chunks[1:] if c["choices"])
    assert output_ids(chunks) == expected_tokens(
        prompt_ids, max_tokens=MAX_TOKENS, seed=SEED, ignore_eos=True
    )
    assert {c["id"] for c in chunks} == {chunks[0]["id"]}
    assert chunks[-1]["usage"]["completion_tokens"] == MAX_TOKENS
    assert chunks[-1]["usage"]["prompt_tokens"] == len(prompt_ids)
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "length"
    # the continuation's prefill found the prompt's blocks cached: it computed only the generated tokens
    full_blocks = len(prompt_ids) // 16 * 16
    assert engine_metric(cluster.prefill, "vllm:prefix_cache_hits_total") - prefill_hits >= full_blocks
    assert_resumed_once(coordinator, cluster, killed)


async def test_a_chat_stream_goes_on_as_chat_without_token_ids(
    cluster: PdCluster, coordinators: StartCoordinator
) -> None:
    coordinator = start(coordinators, cluster, "prefill_first")
    body = chat()
    text, killed = await stream_killing_its_decode(
        coordinator, cluster, "/v1/chat/completions", body, after=8
    )
    chunks = whole_stream(text)
    assert "token_ids" not in text, "token ids leaked to a client that did not ask for them"
    assert {(c["id"], c["object"], c["created"], c["model"]) for c in chunks} == {
        (chunks[0]["id"], "chat.completion.chunk", chunks[0]["created"], "sim-model")
    }
    assert all("text" not in c["choices"][0] for c in chunks if c["choices"])
    replayed = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    # the same request, unbroken, on the surviving decode: the same answer (the sampling is seeded)
    async with httpx.AsyncClient(base_url=coordinator.base_url, timeout=60) as http:
        reference = await http.post(
            "/v1/chat/completions", json=body | {"stream": False, "stream_options": None}
        )
    assert reference.status_code == 200, reference.text
    answer = reference.json()
    assert replayed == answer["choices"][0]["message"]["content"]
    assert chunks[-1]["usage"]["completion_tokens"] == MAX_TOKENS
    assert chunks[-1]["usage"]["prompt_tokens"] == answer["usage"]["prompt_tokens"]
    assert_resumed_once(coordinator, cluster, killed)


async def test_a_request_a_replay_cannot_carry_ends_with_an_error_event(
    cluster: PdCluster, coordinators: StartCoordinator
) -> None:
    coordinator = start(coordinators, cluster, "prefill_first")
    body = completion(stream_tokens=True, response_format={"type": "json_object"})
    text, _ = await stream_killing_its_decode(coordinator, cluster, "/v1/completions", body, after=6)
    chunks = sse_chunks(text)
    assert len(output_ids(chunks)) < MAX_TOKENS
    assert chunks[-1]["error"]["code"] in ("upstream_failed", "incomplete_stream")
    assert text.endswith("data: [DONE]\n\n")
    assert coordinator_metric(coordinator, RESUMED) == 0


async def test_the_replay_goes_on_when_its_prefill_dies_too(
    shared_mooncake_master: RunningPool, sim_engines: StartSimEngine, coordinators: StartCoordinator
) -> None:
    """The decode engine dies mid-stream, then the prefill engine running the replay's prefill leg: the replay's
    prefill moves to the other prefill instance and the client's stream still ends whole."""
    store = shared_mooncake_master.store_config
    slow_prefill = ["--prefill-ms-per-token", "10"]  # a replay leg of ~80 tokens runs for ~0.8 s
    prefills = [
        sim_engines(kv_role="kv_producer", store_config=store, extra_args=slow_prefill) for _ in range(2)
    ]
    reader = {**store, "global_segment_size": 0}
    decode_args = ["--kv-wait-timeout-s", "10", "--itl-ms", "40"]
    decodes = [
        sim_engines(kv_role="kv_consumer", store_config=reader, extra_args=decode_args) for _ in range(2)
    ]
    coordinator = coordinators(profile="prefill_first", coordinator_config=REPLAY)
    coordinator.register(
        [sim_instance(p, "prefill") for p in prefills] + [sim_instance(d, "decode") for d in decodes]
    )
    body = completion(stream_tokens=True)
    killed: list[SimEngine] = []

    async def kill_the_replays_prefill() -> None:
        for _ in range(500):
            running = [p for p in prefills if engine_metric(p, "vllm:num_requests_running")]
            if running:
                running[0].process.kill()
                killed.append(running[0])
                return
            await asyncio.sleep(0.01)

    received = b""
    killer: asyncio.Task[None] | None = None
    async with (
        httpx.AsyncClient(base_url=coordinator.base_url, timeout=60) as http,
        http.stream("POST", "/v1/completions", json=body) as response,
    ):
        assert response.status_code == 200
        async for chunk in response.aiter_bytes():
            received += chunk
            if killer is None and received.count(b"data: {") >= 6:
                decode = next(d for d in decodes if engine_metric(d, "vllm:num_requests_running"))
                decode.process.kill()
                killed.append(decode)
                killer = asyncio.create_task(kill_the_replays_prefill())
    assert killer is not None
    await killer
    assert len(killed) == 2, "the replay's prefill leg was never seen running"
    for engine in killed:
        assert_killed(engine)
    chunks = whole_stream(received.decode())
    prompt_ids = chunks[0]["choices"][0]["prompt_token_ids"]
    assert output_ids(chunks) == expected_tokens(
        prompt_ids, max_tokens=MAX_TOKENS, seed=SEED, ignore_eos=True
    )
    assert chunks[-1]["usage"]["completion_tokens"] == MAX_TOKENS
    assert coordinator_metric(coordinator, RESUMED) == 1
    retried = coordinator_metric(coordinator, 'motor_coordinator_retries_total{role="prefill"}')
    assert retried >= 1, "the replay's prefill leg was not retried on the other prefill"
