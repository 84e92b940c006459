"""The coordinator's HTTP surface: API keys, rate and request limits, OpenAI-style errors, /v1/models,
instance refresh events and readiness, Prometheus metrics, and several worker processes sharing the port."""

import asyncio
import json
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from motor.coordinator.api.auth import hash_api_key
from motor.protocol.controller import ControllerState, bearer
from motor.protocol.instances import Endpoint, Instance
from tests.fixtures.control import TOKEN, ControlPlane, sim_config
from tests.fixtures.coordinator import (
    TEST_TOKEN,
    CoordinatorProcess,
    StartCoordinator,
    coordinator_metric,
    sim_instance,
    wait_coordinator_idle,
    wait_coordinator_metric,
    wait_engine_idle,
)
from tests.fixtures.sim import SimEngine, StartSimEngine, start_sim_engine


@pytest.fixture(scope="module")
def union(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimEngine]:
    engine = start_sim_engine(
        tmp_path_factory.mktemp("coordinator-api"),
        kv_role="kv_both",
        engine_id="union-0",
        extra_args=["--itl-ms", "20"],
    )
    yield engine
    engine.stop()


# Requests that find no instance wait for one within the retry budget; these tests want the 503 quickly.
QUICK_GIVE_UP = {"exception_config": {"max_retry": 2, "retry_delay": 0.01}}


def aggregated(coordinators: StartCoordinator, union: SimEngine, **config: Any) -> CoordinatorProcess:
    coordinator = coordinators(profile="aggregated", coordinator_config=config)
    coordinator.register([sim_instance(union, "union")])
    return coordinator


def completion(**extra: Any) -> dict[str, Any]:
    return {"model": "sim-model", "prompt": "hello there", "max_tokens": 3} | extra


def assert_openai_error(response: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    if code is not None:
        assert error["code"] == code
    return error


async def test_api_keys(coordinators: StartCoordinator, union: SimEngine) -> None:
    hashed = hash_api_key("hashed-key", iterations=1000)
    coordinator = aggregated(
        coordinators, union, api_key_config={"enable_api_key": True, "valid_keys": ["plain-key", hashed]}
    )
    async with httpx.AsyncClient(base_url=coordinator.base_url, timeout=30) as http:
        missing = await http.post("/v1/completions", json=completion())
        assert_openai_error(missing, 401, "missing_api_key")
        assert missing.headers["www-authenticate"].startswith("Bearer")
        wrong = await http.post(
            "/v1/completions", json=completion(), headers={"Authorization": "Bearer nope"}
        )
        assert_openai_error(wrong, 403, "invalid_api_key")
        for key in ("plain-key", "hashed-key"):
            ok = await http.post(
                "/v1/completions", json=completion(), headers={"Authorization": f"Bearer {key}"}
            )
            assert ok.status_code == 200, ok.text
        assert_openai_error(await http.get("/v1/models"), 401)
        models = await http.get("/v1/models", headers={"Authorization": "Bearer plain-key"})
        assert [m["id"] for m in models.json()["data"]] == ["sim-model"]
        assert models.json()["data"][0]["owned_by"] == "motor-sim (simulator, not inference)"
    # probes, metrics and refresh (used by `register` above) need no key
    for path in ("/startup", "/readiness", "/liveness", "/metrics"):
        assert coordinator.mgmt_get(path)[0] == 200
    assert coordinator_metric(coordinator, 'motor_coordinator_rejected_total{reason="missing_api_key"}') == 2
    assert coordinator_metric(coordinator, 'motor_coordinator_rejected_total{reason="invalid_api_key"}') == 1


async def test_rate_limit_uses_the_configured_status_and_message(
    coordinators: StartCoordinator,
    union: SimEngine,
) -> None:
    coordinator = aggregated(
        coordinators,
        union,
        rate_limit_config={
            "enable_rate_limit": True,
            "max_requests": 3,
            "window_size": 3600,
            "error_status_code": 503,
            "error_message": "slow down, please",
        },
    )
    async with httpx.AsyncClient(base_url=coordinator.base_url, timeout=30) as http:
        statuses = [(await http.post("/v1/completions", json=completion())).status_code for _ in range(3)]
        assert statuses == [200, 200, 200]
        limited = await http.post("/v1/completions", json=completion())
    error = assert_openai_error(limited, 503, "rate_limit_exceeded")
    assert error["message"] == "slow down, please"
    assert limited.headers["x-ratelimit-limit"] == "3" and limited.headers["x-ratelimit-remaining"] == "0"
    assert int(limited.headers["retry-after"]) >= 1


async def test_body_size_and_in_flight_limits(coordinators: StartCoordinator, union: SimEngine) -> None:
    coordinator = aggregated(coordinators, union, request_limit={"max_body_bytes": 2048, "max_requests": 2})
    async with httpx.AsyncClient(base_url=coordinator.base_url, timeout=30) as http:
        too_big = await http.post("/v1/completions", json=completion(prompt="x" * 3000))
        assert_openai_error(too_big, 413, "request_too_large")
        streams = [
            http.stream("POST", "/v1/completions", json=completion(stream=True, max_tokens=200))
            for _ in range(2)
        ]
        opened = [await stream.__aenter__() for stream in streams]
        try:
            assert [response.status_code for response in opened] == [200, 200]
            overloaded = await http.post("/v1/completions", json=completion())
            assert_openai_error(overloaded, 503, "overloaded")
            [load] = coordinator.mgmt_get("/instances")[1]["endpoint_load"].values()
            assert load["in_flight"] == 2 and load["tokens"] > 0
        finally:
            for stream in streams:
                await stream.__aexit__(None, None, None)
        # A closed client stream frees its slot once the coordinator notices the disconnect, not at once.
        await wait_coordinator_idle(coordinator)
        assert (await http.post("/v1/completions", json=completion())).status_code == 200
    wait_engine_idle(union)


async def test_request_errors_are_openai_shaped(coordinators: StartCoordinator, union: SimEngine) -> None:
    coordinator = aggregated(coordinators, union)
    async with httpx.AsyncClient(base_url=coordinator.base_url, timeout=30) as http:
        invalid = await http.post(
            "/v1/completions", content=b"{not json", headers={"Content-Type": "application/json"}
        )
        assert_openai_error(invalid, 400, "invalid_json")
        no_messages = await http.post("/v1/chat/completions", json={"model": "sim-model"})
        assert assert_openai_error(no_messages, 400)["param"] == "messages"
        assert_openai_error(
            await http.post("/v1/completions", json=completion(model="gpt-9")), 404, "model_not_found"
        )
        assert_openai_error(await http.get("/v1/completions"), 405)
        assert_openai_error(await http.get("/v1/nothing"), 404)
        # the engine's own refusal (a 4xx) reaches the client as it is, without retries: within the
        # coordinator's max_tokens bound (input_config) but beyond the engine's context
        beyond_context = completion(max_tokens=100_000)
        refused = await http.post("/v1/completions", json=beyond_context)
        direct = await http.post(f"{union.base_url}/v1/completions", json=beyond_context)
        assert 400 <= direct.status_code < 500 and "maximum context length" in direct.text, direct.text
        assert (refused.status_code, refused.json()) == (direct.status_code, direct.json())
    assert coordinator_metric(coordinator, "motor_coordinator_retries_total") == 0


async def test_refresh_events_drive_readiness_and_dispatch(coordinators: StartCoordinator) -> None:
    coordinator = coordinators(profile="prefill_first", coordinator_config=QUICK_GIVE_UP)

    def instance(name: str, role: str) -> Instance:
        return Instance(
            id=name,
            role=role,
            engine_id=name,
            model_name="sim-model",
            endpoints=[Endpoint(host="127.0.0.1", port=9)],
        )  # type: ignore[arg-type]

    status, readiness = coordinator.mgmt_get("/readiness")
    assert (
        status == 200 and readiness["ready"] is False and readiness["missing_roles"] == ["prefill", "decode"]
    )
    async with httpx.AsyncClient(base_url=coordinator.base_url, timeout=30) as http:
        nothing = await http.post("/v1/completions", json=completion())
        error = assert_openai_error(nothing, 503, "no_instance")
        assert "gave up after 3 attempts" in error["message"] and nothing.headers["retry-after"] == "1"
        result = coordinator.register([instance("d0", "decode")], event="add")
        assert result == {"status": "success", "event": "add", "instance_count": 1, "version": 1}
        only_decode = await http.post("/v1/completions", json=completion())
        error = assert_openai_error(only_decode, 503, "no_prefill_instance")
        assert "only decode instances" in error["message"]
        assert (
            coordinator_metric(
                coordinator, 'motor_coordinator_retries_total{role="prefill",reason="no_instance"}'
            )
            == 2
        )
        coordinator.register([instance("p0", "prefill")], event="add")
        status, readiness = coordinator.mgmt_get("/readiness")
        assert readiness["ready"] is True and readiness["serving"] == "prefill_first"
        assert readiness["routable_endpoints"] == {"prefill": 1, "decode": 1, "union": 0, "encode": 0}
        coordinator.register([instance("d0", "decode")], event="del")
        assert (
            coordinator.mgmt_get("/readiness")[1]["serving"] == "aggregated (fallback on prefill instances)"
        )
        coordinator.register([], event="set")
        assert coordinator.mgmt_get("/readiness")[1]["routable_endpoints"] == {
            "prefill": 0,
            "decode": 0,
            "union": 0,
            "encode": 0,
        }
        inactive = instance("p1", "prefill").model_copy(update={"status": "inactive"})
        coordinator.register([inactive], event="set")
        assert coordinator.mgmt_get("/readiness")[1]["missing_roles"] == ["prefill", "decode"]
        assert coordinator.mgmt_get("/instances")[1]["instances"][0]["status"] == "inactive"
    async with httpx.AsyncClient(base_url=coordinator.mgmt_url, timeout=30) as mgmt:
        bad = await mgmt.post(
            "/instances/refresh", json={"event": "replace", "instances": []}, headers=bearer(TEST_TOKEN)
        )
        assert "event" in assert_openai_error(bad, 400)["message"]
    metrics = coordinator.mgmt_get("/metrics")[1]
    assert 'motor_coordinator_instances{role="prefill",state="inactive"} 1.0' in metrics


async def test_a_request_waits_within_its_retry_budget_for_an_instance(
    coordinators: StartCoordinator, union: SimEngine
) -> None:
    """A request that finds no instance (the controller has not registered one yet, or is replacing it)
    backs off and is served once one is registered, instead of failing at once."""
    coordinator = coordinators(
        profile="aggregated", coordinator_config={"exception_config": {"max_retry": 8, "retry_delay": 0.1}}
    )
    waiting = 'motor_coordinator_retries_total{role="union",reason="no_instance"}'
    async with httpx.AsyncClient(base_url=coordinator.base_url, timeout=60) as http:
        request = asyncio.create_task(http.post("/v1/completions", json=completion()))
        for _ in range(500):
            if coordinator_metric(coordinator, waiting) >= 1 or request.done():
                break
            await asyncio.sleep(0.01)
        assert not request.done(), request.result().text
        coordinator.register([sim_instance(union, "union")])
        response = await request
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["text"]
    assert coordinator_metric(coordinator, waiting) >= 1


async def test_instance_refresh_needs_the_controller_token(
    coordinators: StartCoordinator, union: SimEngine
) -> None:
    coordinator = coordinators(profile="aggregated", env={"MOTOR_CONTROLLER_TOKEN": "refresh-token-1"})
    event = {"event": "set", "instances": [sim_instance(union, "union").model_dump(mode="json")]}
    wrong = [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": "refresh-token-1"},
        {"Authorization": ""},
    ]
    async with httpx.AsyncClient(base_url=coordinator.mgmt_url, timeout=10) as mgmt:
        for headers in wrong:
            refused = await mgmt.post("/instances/refresh", json=event, headers=headers)
            assert "MOTOR_CONTROLLER_TOKEN" in assert_openai_error(refused, 401, "invalid_token")["message"]
            assert refused.headers["www-authenticate"].startswith("Bearer")
        readiness = await mgmt.get("/readiness")  # probes stay open
        assert readiness.status_code == 200 and readiness.json()["instance_set_version"] == 0
        accepted = await mgmt.post(
            "/instances/refresh", json=event, headers={"Authorization": "bearer refresh-token-1"}
        )
        assert accepted.status_code == 200 and accepted.json()["version"] == 1
    async with httpx.AsyncClient(base_url=coordinator.base_url, timeout=30) as http:
        assert (await http.post("/v1/completions", json=completion())).status_code == 200
    assert (
        coordinator.register([], event="set")["version"] == 2
    )  # the fixture sends the token it started with


async def test_a_coordinator_without_the_controller_token_accepts_no_refresh(
    coordinators: StartCoordinator, union: SimEngine
) -> None:
    coordinator = coordinators(profile="aggregated", env={"MOTOR_CONTROLLER_TOKEN": ""})
    event = {"event": "set", "instances": [sim_instance(union, "union").model_dump(mode="json")]}
    async with httpx.AsyncClient(base_url=coordinator.mgmt_url, timeout=10) as mgmt:
        for headers in ({}, {"Authorization": "Bearer x"}, bearer(TEST_TOKEN)):
            refused = await mgmt.post("/instances/refresh", json=event, headers=headers)
            message = assert_openai_error(refused, 401, "invalid_token")["message"]
            assert "started without MOTOR_CONTROLLER_TOKEN" in message
        assert (await mgmt.get("/readiness")).json()["instance_set_version"] == 0


async def test_the_controller_pushes_with_its_token(
    tmp_path: Path, coordinators: StartCoordinator, control_plane: ControlPlane
) -> None:
    same = coordinators(profile="prefill_first", env={"MOTOR_CONTROLLER_TOKEN": TOKEN})
    other = coordinators(profile="prefill_first", env={"MOTOR_CONTROLLER_TOKEN": "another-token"})
    config = sim_config(tmp_path / "config", pool=False)
    control_plane.controller(config, coordinators=f"{same.mgmt_url},{other.mgmt_url}")
    async with httpx.AsyncClient(base_url=config.controller_url, timeout=10) as client:
        for _ in range(200):
            response = await client.get("/controller/instances", headers=bearer(TOKEN))
            links = {link.url: link for link in ControllerState.model_validate(response.json()).coordinators}
            if links[same.mgmt_url].acknowledged_events and links[other.mgmt_url].last_error:
                break
            await asyncio.sleep(0.05)
    accepted, refused = links[same.mgmt_url], links[other.mgmt_url]
    assert accepted.acknowledged_events >= 1 and accepted.last_error is None, accepted
    assert same.mgmt_get("/readiness")[1]["instance_set_version"] >= 1
    assert refused.acknowledged_events == 0 and "HTTP 401" in (refused.last_error or ""), refused
    assert other.mgmt_get("/readiness")[1]["instance_set_version"] == 0


async def test_metrics_cover_every_family(coordinators: StartCoordinator, union: SimEngine) -> None:
    coordinator = aggregated(coordinators, union)
    async with httpx.AsyncClient(base_url=coordinator.base_url, timeout=30) as http:
        for stream in (False, True):
            assert (await http.post("/v1/completions", json=completion(stream=stream))).status_code == 200
    status, text = coordinator.mgmt_get("/metrics")
    assert status == 200
    for family in (
        "motor_coordinator_requests_total",
        "motor_coordinator_ttft_seconds_bucket",
        "motor_coordinator_itl_seconds_bucket",
        "motor_coordinator_e2e_seconds_bucket",
        "motor_coordinator_leg_seconds_bucket",
        "motor_coordinator_overhead_seconds_bucket",
        "motor_coordinator_in_flight_requests",
        "motor_coordinator_instances",
        "motor_coordinator_retries_total",
        "motor_coordinator_cancelled_legs_total",
    ):
        assert f"\n{family}" in text or f"# TYPE {family.rsplit('_bucket', 1)[0]}" in text, family
    assert coordinator_metric(coordinator, "motor_coordinator_itl_seconds_count") == 2  # 3 tokens, 2 gaps
    wait_coordinator_metric(coordinator, "motor_coordinator_overhead_seconds_count", 2)  # after the answer
    # on arrival: "hello there" counted as 3 prompt tokens (11 characters / 4), max_tokens 3, each time
    assert coordinator_metric(coordinator, "motor_coordinator_request_prompt_tokens_count") == 2
    assert coordinator_metric(coordinator, "motor_coordinator_request_prompt_tokens_sum") == 6
    assert coordinator_metric(coordinator, "motor_coordinator_request_max_tokens_sum") == 6


async def test_workers_share_the_port_the_instance_set_and_the_limits(
    coordinators: StartCoordinator,
    union: SimEngine,
) -> None:
    coordinator = aggregated(
        coordinators,
        union,
        **QUICK_GIVE_UP,
        inference_workers_config={"num_workers": 2},
        rate_limit_config={"enable_rate_limit": True, "max_requests": 12, "window_size": 3600},
    )
    workers = coordinator.mgmt_get("/liveness")[1]["workers"]
    assert [w["ready"] for w in workers] == [True, True]

    async def fresh_connection_requests(count: int) -> list[int]:
        statuses = []
        for _ in range(count):  # a new connection each time: SO_REUSEPORT spreads them over the workers
            async with httpx.AsyncClient(base_url=coordinator.base_url, timeout=30) as http:
                statuses.append((await http.post("/v1/completions", json=completion())).status_code)
        return statuses

    assert await fresh_connection_requests(8) == [200] * 8
    coordinator.register([], event="set")  # acknowledged by every worker before the refresh answers
    assert await fresh_connection_requests(4) == [503] * 4
    coordinator.register([sim_instance(union, "union")])

    os.kill(workers[0]["pid"], signal.SIGKILL)  # a worker dies: the supervisor restarts it with the set
    deadline = time.monotonic() + 20
    while True:
        _, liveness = coordinator.mgmt_get("/liveness")
        restarted = liveness["workers"][0]
        if restarted["ready"] and restarted["pid"] != workers[0]["pid"]:
            break
        assert time.monotonic() < deadline, liveness
        await asyncio.sleep(0.1)
    assert restarted["restarts"] == 1 and coordinator.mgmt_get("/startup")[0] == 200

    # 12 tokens in the shared bucket: 8 + 4 spent, everything after is refused whichever worker answers
    statuses = await fresh_connection_requests(6)
    assert statuses.count(429) == 6, statuses
    wait_coordinator_metric(coordinator, 'motor_coordinator_requests_total{status="429"}', 6)


async def test_a_client_that_stops_reading_is_cut_off_after_write_timeout(
    coordinators: StartCoordinator, sim_engines: StartSimEngine
) -> None:
    # 0.25 ms a token keeps the leg open for 25 s, and the coordinator's sends block after a few seconds, once
    # the sockets' buffers are full (with no inter-token latency the whole answer could fit in them)
    engine = sim_engines(kv_role="kv_both", extra_args=["--max-model-len", "120000", "--itl-ms", "0.25"])
    coordinator = aggregated(coordinators, engine, timeout_config={"write_timeout": 1})
    request = json.dumps(completion(stream=True, max_tokens=100000, ignore_eos=True)).encode()
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.connect(("127.0.0.1", coordinator.infer_port))
    _, writer = await asyncio.open_connection(sock=client)
    writer.write(
        b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%b" % (len(request), request)
    )
    await writer.drain()
    try:
        # never read: the coordinator's sends block, and after write_timeout it ends the request and its leg
        deadline = time.monotonic() + 30
        while not coordinator_metric(
            coordinator, 'motor_coordinator_cancelled_legs_total{reason="write_timeout"}'
        ):
            assert time.monotonic() < deadline, coordinator.log_text()[-2000:]
            await asyncio.sleep(0.2)
        await asyncio.to_thread(wait_engine_idle, engine)
    finally:
        writer.close()
