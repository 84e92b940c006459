"""PD disaggregation through the real pool: the test drives both legs by hand, as the coordinator does, for each
dispatch profile of docs/kv_transfer_params.md, and checks D's tokens against the aggregated path and the oracle.
"""

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from aiohttp import web

from tests.fixtures.pool import RunningPool
from tests.fixtures.sim import (
    SIM_ADMIN,
    SimEngine,
    StartSimEngine,
    expected_tokens,
    free_port,
    fresh_prompt,
    openai_body,
    start_ready_together,
)

KV_WAIT_TIMEOUT_S = 2.0
LABELS = 'engine="0",model_name="sim-model"'
CACHED_BY_SOURCE = "vllm:prompt_tokens_cached_by_source_total"


@dataclass
class Cluster:
    prefill: SimEngine
    decode: SimEngine
    aggregated: SimEngine  # kv_both without a pool: the reference path, always recomputes
    http: httpx.AsyncClient

    async def post(
        self, engine: SimEngine, body: dict[str, Any], request_id: str = "r", endpoint: str = "completions"
    ) -> httpx.Response:
        return await self.http.post(
            f"{engine.base_url}/v1/{endpoint}", json=body, headers={"X-Request-Id": request_id}
        )

    async def complete(self, engine: SimEngine, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        response = await self.post(engine, body, **kwargs)
        assert response.status_code == 200, response.text
        return response.json()

    async def set_faults(self, engine: SimEngine, **faults: Any) -> None:
        response = await self.http.post(f"{engine.base_url}/admin/faults", json=faults, headers=SIM_ADMIN)
        assert response.status_code == 200, response.text

    async def metric(self, engine: SimEngine, name: str) -> float:
        for line in (await self.http.get(f"{engine.base_url}/metrics")).text.splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"{name} not exported")


@pytest.fixture
async def cluster(mooncake_master: RunningPool, sim_engines: StartSimEngine) -> AsyncIterator[Cluster]:
    store = mooncake_master.store_config
    engines = start_ready_together(
        sim_engines,
        {"kv_role": "kv_producer", "engine_id": "prefill-0", "store_config": store},
        {
            "kv_role": "kv_consumer",
            "engine_id": "decode-0",
            "store_config": store,
            "extra_args": ["--kv-wait-timeout-s", str(KV_WAIT_TIMEOUT_S)],
        },
        {"kv_role": "kv_both", "engine_id": "union-0"},
    )
    async with httpx.AsyncClient(timeout=30) as http:
        yield Cluster(*engines, http)


def client_body(prompt: str, endpoint: str = "completions", **extra: Any) -> dict[str, Any]:
    fields = {"max_tokens": 10, "seed": 5, "temperature": 1.0, "ignore_eos": True, "return_token_ids": True}
    return openai_body(endpoint, prompt, **fields) | extra


def prefill_leg(body: dict[str, Any], kv_transfer_params: dict[str, Any]) -> dict[str, Any]:
    """The contract's prefill-leg shaping."""
    shaped = {key: value for key, value in body.items() if key != "stream_options"}
    shaped.update(stream=False, max_tokens=1, min_tokens=1, kv_transfer_params=kv_transfer_params)
    if "max_completion_tokens" in body:
        shaped["max_completion_tokens"] = 1
    return shaped


def tokens(response: dict[str, Any]) -> list[int]:
    return response["choices"][0]["token_ids"]


def prompt_ids(response: dict[str, Any]) -> list[int]:
    return response.get("prompt_token_ids") or response["choices"][0]["prompt_token_ids"]


async def reference(cluster: Cluster, body: dict[str, Any], endpoint: str = "completions") -> list[int]:
    """Tokens of the aggregated path, checked against the oracle."""
    aggregated = await cluster.complete(cluster.aggregated, body, endpoint=endpoint)
    assert tokens(aggregated) == expected_tokens(
        prompt_ids(aggregated), max_tokens=10, seed=5, ignore_eos=True
    )
    return tokens(aggregated)


@pytest.mark.parametrize("endpoint", ["completions", "chat/completions"])
async def test_prefill_first(cluster: Cluster, endpoint: str) -> None:
    body = client_body(fresh_prompt(), endpoint)
    expected = await reference(cluster, body, endpoint)

    p = await cluster.complete(
        cluster.prefill,
        prefill_leg(body, {"do_remote_decode": True, "do_remote_prefill": False}),
        request_id="pf-1",
        endpoint=endpoint,
    )
    params = p["kv_transfer_params"]
    shareable = (len(prompt_ids(p)) - 1) // 16
    assert params["do_remote_prefill"] is True and params["do_remote_decode"] is False
    assert (params["remote_engine_id"], params["remote_port"]) == ("prefill-0", cluster.prefill.port)
    assert len(params["remote_block_keys"]) == shareable >= 2
    assert "kv_error" not in params and p["usage"]["completion_tokens"] == 1

    d = await cluster.complete(
        cluster.decode, body | {"kv_transfer_params": params}, request_id="pf-1", endpoint=endpoint
    )
    assert tokens(d) == expected
    assert d["usage"]["prompt_tokens_details"]["cached_tokens"] == shareable * 16
    assert (
        await cluster.metric(
            cluster.decode,
            'vllm:prompt_tokens_by_source_total{engine="0",model_name="sim-model",source="external_kv_transfer"}',
        )
        == shareable * 16
    )
    assert await cluster.metric(cluster.prefill, "motor_sim_kv_blocks_written_total") == shareable
    # vLLM's cache tier of those tokens: transferred from another instance (p2p), not looked up in the pool
    assert (
        await cluster.metric(cluster.decode, f'{CACHED_BY_SOURCE}{{{LABELS},source="p2p"}}') == shareable * 16
    )


async def test_store_style_decode_finds_the_prompt_and_shared_prefixes_by_hash(cluster: Cluster) -> None:
    body = client_body(fresh_prompt(50))
    expected = await reference(cluster, body)
    await cluster.complete(cluster.prefill, prefill_leg(body, {"do_remote_decode": True}))
    d = await cluster.complete(cluster.decode, body)  # P returned params, but a store-style flow passes none
    assert tokens(d) == expected and d["usage"]["prompt_tokens_details"]["cached_tokens"] == 48
    looked_up = f'{CACHED_BY_SOURCE}{{{LABELS},source="external_unspecified"}}'
    assert await cluster.metric(cluster.decode, looked_up) == 48

    # a prompt D never saw, sharing its first 32 tokens with one P prefilled: those come from the pool
    prompt = fresh_prompt(50)
    await cluster.complete(cluster.prefill, prefill_leg(client_body(prompt), {"do_remote_decode": True}))
    external = (
        'vllm:prompt_tokens_by_source_total{engine="0",model_name="sim-model",source="external_kv_transfer"}'
    )
    before = await cluster.metric(cluster.decode, external)
    shared = client_body(" ".join(prompt.split()[:32]) + " " + fresh_prompt(20))
    other = await cluster.complete(cluster.decode, shared)
    assert other["usage"]["prompt_tokens_details"]["cached_tokens"] == 32
    assert await cluster.metric(cluster.decode, external) == before + 32
    assert tokens(other) == await reference(cluster, shared)


async def test_stream_decode_leg(cluster: Cluster) -> None:
    body = client_body(fresh_prompt())
    expected = await reference(cluster, body)
    p = await cluster.complete(cluster.prefill, prefill_leg(body, {"do_remote_decode": True}))
    stream_body = body | {
        "stream": True,
        "stream_options": {"include_usage": True},
        "kv_transfer_params": p["kv_transfer_params"],
    }
    response = await cluster.post(cluster.decode, stream_body)
    chunks = [
        json.loads(event.removeprefix("data: "))
        for event in response.text.split("\n\n")
        if event.startswith("data: {")
    ]
    assert [token for chunk in chunks[:-1] for token in chunk["choices"][0]["token_ids"]] == expected
    assert chunks[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] == 32


class CallbackServer:
    """The coordinator's metaserver for decode_first: runs the prefill leg with the callback body."""

    def __init__(self, cluster: Cluster, body: dict[str, Any], *, fail_with: int | None = None) -> None:
        self.cluster = cluster
        self.body = body
        self.fail_with = fail_with
        self.calls: list[dict[str, Any]] = []
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/callback/r-df"
        self._runner: web.AppRunner | None = None

    async def handle(self, request: web.Request) -> web.Response:
        callback = await request.json()
        self.calls.append(callback)
        if self.fail_with is not None:
            error = {
                "error": {
                    "message": "prefill failed",
                    "type": "InternalServerError",
                    "param": None,
                    "code": self.fail_with,
                }
            }
            return web.json_response(error, status=self.fail_with)
        p = await self.cluster.complete(
            self.cluster.prefill, prefill_leg(self.body, callback), request_id=callback["request_id"]
        )
        return web.json_response(p)

    async def __aenter__(self) -> "CallbackServer":
        app = web.Application()
        app.router.add_post("/callback/{request_id}", self.handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()


async def test_decode_first(cluster: Cluster) -> None:
    body = client_body(fresh_prompt())
    expected = await reference(cluster, body)
    async with CallbackServer(cluster, body) as server:
        params = {"do_remote_decode": False, "do_remote_prefill": True, "metaserver": server.url}
        d = await cluster.complete(cluster.decode, body | {"kv_transfer_params": params}, request_id="r-df")
    assert tokens(d) == expected
    assert d["usage"]["prompt_tokens_details"]["cached_tokens"] == 32
    [callback] = server.calls
    assert callback["request_id"] == "r-df" and callback["remote_engine_id"] == "decode-0"
    assert callback["do_remote_decode"] is True and callback["do_remote_prefill"] is False
    assert callback["transfer_id"]


async def test_decode_first_callback_failures_are_answered_not_hung(cluster: Cluster) -> None:
    body = client_body(fresh_prompt())
    async with CallbackServer(cluster, body, fail_with=500) as server:
        failed = await cluster.post(
            cluster.decode,
            body | {"kv_transfer_params": {"do_remote_prefill": True, "metaserver": server.url}},
        )
    assert failed.status_code == 502
    assert (
        "HTTP 500" in failed.json()["error"]["message"]
        and "prefill failed" in failed.json()["error"]["message"]
    )

    unreachable = f"http://127.0.0.1:{free_port()}/callback/x"
    refused = await cluster.post(
        cluster.decode, body | {"kv_transfer_params": {"do_remote_prefill": True, "metaserver": unreachable}}
    )
    assert refused.status_code == 502 and unreachable in refused.json()["error"]["message"]
    assert await cluster.metric(cluster.decode, "vllm:num_requests_waiting") == 0


async def concurrent_legs(
    cluster: Cluster, body: dict[str, Any], room: int, *, prefill_delay_s: float
) -> dict[str, Any]:
    transfer_id = str(room)
    bootstrap = {"bootstrap_host": "127.0.0.1", "bootstrap_port": 8998, "bootstrap_room": room}
    p_params = {"do_remote_decode": True, "do_remote_prefill": False, "transfer_id": transfer_id}
    d_params = {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "transfer_id": transfer_id,
        "remote_engine_id": "prefill-0",
        "remote_bootstrap_addr": "http://127.0.0.1:8998",
    }

    async def prefill() -> dict[str, Any]:
        await asyncio.sleep(prefill_delay_s)
        return await cluster.complete(cluster.prefill, prefill_leg(body, p_params) | bootstrap)

    d, p = await asyncio.gather(
        cluster.complete(cluster.decode, body | bootstrap | {"kv_transfer_params": d_params}), prefill()
    )
    assert p["kv_transfer_params"]["transfer_id"] == transfer_id
    return d


async def test_concurrent(cluster: Cluster) -> None:
    for room, delay in ((1234567890123, 0.0), (987654321, 0.3)):  # both at once; D well before P
        body = client_body(fresh_prompt())
        d = await concurrent_legs(cluster, body, room, prefill_delay_s=delay)
        assert tokens(d) == await reference(cluster, body)
        assert d["usage"]["prompt_tokens_details"]["cached_tokens"] == 32


async def test_concurrent_decode_gives_up_after_the_kv_wait_timeout(cluster: Cluster) -> None:
    params = {"do_remote_prefill": True, "transfer_id": "424242", "remote_engine_id": "prefill-0"}
    response = await cluster.post(
        cluster.decode, client_body(fresh_prompt()) | {"kv_transfer_params": params}
    )
    assert response.status_code == 504
    message = response.json()["error"]["message"]
    assert "424242" in message and f"{KV_WAIT_TIMEOUT_S:g}s" in message
    assert await cluster.metric(cluster.decode, "vllm:num_requests_waiting") == 0


async def test_kv_faults_and_negative_controls(cluster: Cluster) -> None:
    async def pd(
        body: dict[str, Any], *, p_body: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        p = await cluster.complete(cluster.prefill, prefill_leg(p_body or body, {"do_remote_decode": True}))
        d = await cluster.complete(cluster.decode, body | {"kv_transfer_params": p["kv_transfer_params"]})
        return p, d

    body = client_body(fresh_prompt())
    expected = await reference(cluster, body)
    await cluster.set_faults(cluster.decode, kv_corrupt=True)
    _, corrupted = await pd(body)
    await cluster.set_faults(cluster.decode, kv_corrupt=False)
    assert corrupted["usage"]["prompt_tokens_details"]["cached_tokens"] == 32
    assert tokens(corrupted) != expected

    body = client_body(fresh_prompt())
    expected = await reference(cluster, body)
    await cluster.set_faults(cluster.decode, kv_get_fail=True)
    _, unread = await pd(body)
    await cluster.set_faults(cluster.decode, kv_get_fail=False)
    assert tokens(unread) == expected and unread["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert await cluster.metric(cluster.decode, "motor_sim_kv_get_failures_total") == 1

    body = client_body(fresh_prompt())
    expected = await reference(cluster, body)
    await cluster.set_faults(cluster.prefill, kv_put_fail=True)
    unwritten, recomputed = await pd(body)
    await cluster.set_faults(cluster.prefill, kv_put_fail=False)
    assert unwritten["kv_transfer_params"]["remote_block_keys"] == []
    assert "kv_put_fail" in unwritten["kv_transfer_params"]["kv_error"]
    assert (
        tokens(recomputed) == expected and recomputed["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    )

    # P prefilled another prompt of the same length: D decodes from foreign KV, so its tokens differ
    body = client_body(fresh_prompt())
    expected = await reference(cluster, body)
    _, foreign = await pd(body, p_body=client_body(fresh_prompt()))
    assert foreign["usage"]["prompt_tokens_details"]["cached_tokens"] == 32
    assert tokens(foreign) != expected

    # a kv_consumer asked to act as the prefill leg computes but writes nothing
    body = client_body(fresh_prompt())
    as_prefill = await cluster.complete(cluster.decode, prefill_leg(body, {"do_remote_decode": True}))
    assert as_prefill["kv_transfer_params"]["remote_block_keys"] == []
    assert "kv_consumer" in as_prefill["kv_transfer_params"]["kv_error"]
    assert await cluster.metric(cluster.decode, "motor_sim_kv_blocks_written_total") == 0
