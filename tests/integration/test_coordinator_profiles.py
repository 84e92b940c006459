"""Every dispatch profile end to end through a real coordinator process, sim engines and a real
mooncake_master: stream and not, completions and chat; PD tokens equal the aggregated tokens (and the
oracle); the decode engine got every fresh prompt's KV through kv_transfer_params (tests/fixtures/kv_handover.py);
the client sees one normal OpenAI response with the prefill's cached tokens."""

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.fixtures.coordinator import (
    StartCoordinator,
    coordinator_metric,
    sim_instance,
    sse_chunks,
    wait_coordinator_metric,
    wait_engine_idle,
)
from tests.fixtures.kv_handover import assert_kv_handover, decode_counters
from tests.fixtures.pool import RunningPool
from tests.fixtures.processes import stopping_factory
from tests.fixtures.sim import (
    SimEngine,
    expected_tokens,
    fresh_prompt,
    openai_body,
    start_prefill_decode_union,
    start_sim_engine,
)

MAX_TOKENS = 10
# every attempt's transitions in the coordinator's log (motor/coordinator/dispatch/observe.py)
TRANSITIONS_LOGGED = {"logging_config": {"log_level": "DEBUG"}}
SEED = 5
BLOCK_SIZE = 16  # the sim engines' default


@dataclass
class Engines:
    prefill: SimEngine
    decode: SimEngine
    union: SimEngine  # kv_both without a pool: the aggregated reference, always recomputes


@pytest.fixture(scope="module")
def engines(
    shared_mooncake_master: RunningPool, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Engines]:
    store = shared_mooncake_master.store_config
    with stopping_factory(start_sim_engine, tmp_path_factory.mktemp("coordinator-profiles")) as start:
        yield Engines(*start_prefill_decode_union(start, store))


def client_body(prompt: str, endpoint: str, stream: bool) -> dict[str, Any]:
    body = openai_body(
        endpoint,
        prompt,
        model="sim-model",
        max_tokens=MAX_TOKENS,
        seed=SEED,
        temperature=1.0,
        ignore_eos=True,
        return_token_ids=True,
        stream=stream,
    )
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


async def reference_tokens(
    http: httpx.AsyncClient, union: SimEngine, body: dict[str, Any], endpoint: str
) -> list[int]:
    """Tokens of the aggregated path straight from the engine, checked against the oracle."""
    response = await http.post(
        f"{union.base_url}/v1/{endpoint}", json=body | {"stream": False, "stream_options": None}
    )
    assert response.status_code == 200, response.text
    payload = response.json()
    tokens = payload["choices"][0]["token_ids"]
    prompt_ids = payload.get("prompt_token_ids") or payload["choices"][0]["prompt_token_ids"]
    assert tokens == expected_tokens(prompt_ids, max_tokens=MAX_TOKENS, seed=SEED, ignore_eos=True)
    return tokens


async def check_requests(http: httpx.AsyncClient, engines: Engines, profile: str) -> None:
    # The reference must not warm the serving engine's prefix cache: the aggregated coordinator serves from
    # the union engine, so its reference comes from another engine (the prefill one, asked directly).
    reference = engines.prefill if profile == "aggregated" else engines.union
    for endpoint in ("completions", "chat/completions"):
        for stream in (False, True):
            body = client_body(fresh_prompt(), endpoint, stream)
            expected = await reference_tokens(http, reference, body, endpoint)
            request_id = f"{profile}-{endpoint.replace('/', '-')}-{stream}"
            decode_before = decode_counters(engines.decode.base_url)
            response = await http.post(f"/v1/{endpoint}", json=body, headers={"X-Request-Id": request_id})
            assert response.status_code == 200, response.text
            assert response.headers["x-request-id"] == request_id
            if stream:
                assert response.headers["content-type"].startswith("text/event-stream")
                assert response.text.endswith("data: [DONE]\n\n")
                chunks = sse_chunks(response.text)
                tokens = [t for c in chunks if c["choices"] for t in c["choices"][0].get("token_ids") or []]
                usage = chunks[-1]["usage"]
                # engines get motor's request id, never the client's (it is only echoed in the header)
                assert len({c["id"] for c in chunks}) == 1 and request_id not in chunks[0]["id"]
            else:
                payload = response.json()
                tokens = payload["choices"][0]["token_ids"]
                usage = payload["usage"]
                assert request_id not in payload["id"]
                assert "kv_transfer_params" not in payload or profile == "aggregated"
            assert tokens == expected, f"{profile} {endpoint} stream={stream}"
            assert usage["completion_tokens"] == MAX_TOKENS
            if profile != "aggregated":
                after = decode_counters(engines.decode.base_url)
                assert_kv_handover(decode_before, after, usage["prompt_tokens"], BLOCK_SIZE)
            # A fresh prompt: the prefill (or the aggregated engine) computed every token itself.
            assert usage["prompt_tokens_details"]["cached_tokens"] == 0


@pytest.mark.parametrize("profile", ["prefill_first", "decode_first", "concurrent"])
async def test_pd_profile_matches_the_aggregated_tokens(
    engines: Engines,
    coordinators: StartCoordinator,
    profile: str,
) -> None:
    coordinator = coordinators(profile=profile, coordinator_config=TRANSITIONS_LOGGED)
    coordinator.register([sim_instance(engines.prefill, "prefill"), sim_instance(engines.decode, "decode")])
    async with httpx.AsyncClient(base_url=coordinator.base_url, timeout=30) as http:
        await check_requests(http, engines, profile)

        # The same prompt again: the prefill's own prefix cache serves part of it, and the client sees the
        # prefill's count (the decode received every prompt token and would report all of them).
        body = client_body(fresh_prompt(), "completions", False)
        expected = await reference_tokens(http, engines.union, body, "completions")
        decode_before = decode_counters(engines.decode.base_url)
        first = (await http.post("/v1/completions", json=body)).json()
        assert_kv_handover(
            decode_before,
            decode_counters(engines.decode.base_url),
            first["usage"]["prompt_tokens"],
            BLOCK_SIZE,
        )
        again = (await http.post("/v1/completions", json=body)).json()
        assert first["choices"][0]["token_ids"] == again["choices"][0]["token_ids"] == expected
        assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        cached = again["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert 0 < cached < again["usage"]["prompt_tokens"]

    for engine in (engines.prefill, engines.decode):
        wait_engine_idle(engine)
    # counted once the coordinator answered: the last request's count may follow its response
    completions = 'motor_coordinator_requests_total{route="completions",status="200"}'
    wait_coordinator_metric(coordinator, completions, 4)
    wait_coordinator_metric(coordinator, "motor_coordinator_overhead_seconds_count", 6)
    assert coordinator_metric(coordinator, 'motor_coordinator_leg_seconds_count{leg="prefill"}') == 6
    assert coordinator_metric(coordinator, 'motor_coordinator_leg_seconds_count{leg="decode"}') == 6
    # kv_wait is the time from the prefill's answer to the decode's first output; under concurrent the decode
    # may produce output before the prefill's answer was read (PREFILL → STREAMING), and then there is none
    log = coordinator.log_text()
    handed_over, output_first = log.count(" HANDOVER → STREAMING "), log.count(" PREFILL → STREAMING ")
    assert handed_over + output_first == 6, log[-4000:]
    assert output_first == 0 or profile == "concurrent"
    assert (
        coordinator_metric(coordinator, 'motor_coordinator_leg_seconds_count{leg="kv_wait"}') == handed_over
    )
    assert coordinator_metric(coordinator, "motor_coordinator_ttft_seconds_count") == 2
    assert coordinator_metric(coordinator, "motor_coordinator_retries_total") == 0


async def test_aggregated_profile(engines: Engines, coordinators: StartCoordinator) -> None:
    coordinator = coordinators(profile="aggregated")
    coordinator.register([sim_instance(engines.union, "union")])
    async with httpx.AsyncClient(base_url=coordinator.base_url, timeout=30) as http:
        await check_requests(http, engines, "aggregated")
    wait_engine_idle(engines.union)
    assert coordinator_metric(coordinator, 'motor_coordinator_leg_seconds_count{leg="aggregated"}') == 4
    assert coordinator_metric(coordinator, 'motor_coordinator_leg_seconds_count{leg="prefill"}') == 0


async def test_pd_profile_falls_back_to_aggregated_on_prefill_instances(
    engines: Engines,
    coordinators: StartCoordinator,
) -> None:
    coordinator = coordinators(profile="prefill_first")
    coordinator.register([sim_instance(engines.prefill, "prefill")])
    status, readiness = coordinator.mgmt_get("/readiness")
    assert status == 200 and readiness["ready"] is False and readiness["missing_roles"] == ["decode"]
    assert readiness["serving"] == "aggregated (fallback on prefill instances)"
    async with httpx.AsyncClient(base_url=coordinator.base_url, timeout=30) as http:
        body = client_body(fresh_prompt(), "completions", False)
        expected = await reference_tokens(http, engines.union, body, "completions")
        response = await http.post("/v1/completions", json=body)
        assert response.status_code == 200, response.text
        assert response.json()["choices"][0]["token_ids"] == expected
    assert coordinator_metric(coordinator, 'motor_coordinator_leg_seconds_count{leg="aggregated"}') == 1


async def test_decode_first_callbacks_reach_the_worker_that_holds_the_request(
    engines: Engines, coordinators: StartCoordinator
) -> None:
    """With several workers each serves its own callback port, so the decode engine's call lands where the
    request lives whichever worker accepted the client."""
    coordinator = coordinators(
        profile="decode_first", coordinator_config={"inference_workers_config": {"num_workers": 2}}
    )
    coordinator.register([sim_instance(engines.prefill, "prefill"), sim_instance(engines.decode, "decode")])
    for stream in (False, True, False, True):
        async with httpx.AsyncClient(
            base_url=coordinator.base_url, timeout=30
        ) as http:  # a new connection each
            body = client_body(fresh_prompt(), "completions", stream)
            expected = await reference_tokens(http, engines.union, body, "completions")
            decode_before = decode_counters(engines.decode.base_url)
            response = await http.post("/v1/completions", json=body)
        assert response.status_code == 200, response.text
        if stream:
            chunks = sse_chunks(response.text)
            tokens = [t for c in chunks if c["choices"] for t in c["choices"][0]["token_ids"]]
            usage = chunks[-1]["usage"]
        else:
            tokens = response.json()["choices"][0]["token_ids"]
            usage = response.json()["usage"]
        assert tokens == expected
        after = decode_counters(engines.decode.base_url)
        assert_kv_handover(decode_before, after, usage["prompt_tokens"], BLOCK_SIZE)
    for engine in (engines.prefill, engines.decode):
        wait_engine_idle(engine)


async def test_handover_check_fails_when_the_decode_leg_lacks_kv_transfer_params(
    engines: Engines,
) -> None:
    """The negative control of assert_kv_handover: a PD request whose decode leg lost its kv_transfer_params."""
    async with httpx.AsyncClient(timeout=30) as http:
        # The prefill leg as the coordinator shapes it for prefill_first: P writes the prompt's blocks to the pool.
        body = client_body(fresh_prompt(), "completions", False)
        prefill_leg = body | {
            "max_tokens": 1,
            "min_tokens": 1,
            "kv_transfer_params": {"do_remote_decode": True},
        }
        prefilled = await http.post(f"{engines.prefill.base_url}/v1/completions", json=prefill_leg)
        assert prefilled.status_code == 200, prefilled.text
        blocks = len(prefilled.json()["kv_transfer_params"]["remote_block_keys"])
        assert blocks >= 2

        # The decode leg without P's kv_transfer_params: D still finds the blocks in the pool by the prompt's own
        # hashes, so its external-transfer count alone looks like a handover ...
        before = decode_counters(engines.decode.base_url)
        decoded = await http.post(f"{engines.decode.base_url}/v1/completions", json=body)
        assert decoded.status_code == 200, decoded.text
        after = decode_counters(engines.decode.base_url)
        external = after.by_source["external_kv_transfer"] - before.by_source["external_kv_transfer"]
        assert external == blocks * BLOCK_SIZE
        # ... but the KV came from a pool lookup, not through kv_transfer_params, and the check says so.
        with pytest.raises(AssertionError, match="pool lookup"):
            assert_kv_handover(before, after, decoded.json()["usage"]["prompt_tokens"], BLOCK_SIZE)

        # A decode that got no KV at all (no params, nothing in the pool) computes the prompt itself.
        body = client_body(fresh_prompt(), "completions", False)
        before = decode_counters(engines.decode.base_url)
        decoded = await http.post(f"{engines.decode.base_url}/v1/completions", json=body)
        assert decoded.status_code == 200, decoded.text
        after = decode_counters(engines.decode.base_url)
        with pytest.raises(AssertionError, match="not handed over"):
            assert_kv_handover(before, after, decoded.json()["usage"]["prompt_tokens"], BLOCK_SIZE)
