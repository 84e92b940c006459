"""The encode (E) leg through a real coordinator process and plain sim engines on 127.0.0.1: an image chat request
makes exactly one E leg and then its P and D legs, in every dispatch profile; a text request makes none; a failing
E is retried on the other one; with the only E failing, or only inactive ones registered, the client gets a clear
OpenAI error at once; without any E registered the prefill side serves the images itself.

An encode leg is a child span of its attempt, beside the prefill and decode legs' spans. E legs are counted on
the E engines (`vllm:request_success_total{finished_reason="length"}`: the leg asks for
one token) and on the coordinator (`motor_coordinator_encode_legs_total`)."""

import base64
import secrets
import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.fixtures.coordinator import (
    CoordinatorProcess,
    StartCoordinator,
    coordinator_metric,
    engine_metric,
    set_engine_faults,
    sim_instance,
    sse_chunks,
    wait_engine_idle,
)
from tests.fixtures.otlp import otlp_receiver
from tests.fixtures.pool import RunningPool
from tests.fixtures.processes import stopping_factory
from tests.fixtures.sim import SimEngine, fresh_prompt, start_prefill_decode_union, start_sim_engine

ANSWERED = 'vllm:request_success_total{finished_reason="length"}'
FAST_FAILURE = {
    "exception_config": {"max_retry": 2, "retry_delay": 0.05, "first_token_timeout": 5, "infer_timeout": 20},
    "timeout_config": {"request_timeout": 3, "read_timeout": 3, "connection_timeout": 1},
}
NO_FAULTS = {"hang": False, "slowdown": 1.0, "error_rate": 0.0, "health_down": False}
PROFILES = ["prefill_first", "decode_first", "concurrent", "aggregated"]


def png_data_url(width: int, height: int) -> str:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = struct.pack(">I", len(ihdr)) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    return "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n" + chunk).decode()


def chat(*, image: bool, stream: bool = False) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": fresh_prompt(20)}]
    if image:
        content.append({"type": "image_url", "image_url": {"url": png_data_url(64, 96)}})
    body: dict[str, Any] = {
        "model": "sim-model",
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 6,
        "ignore_eos": True,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


@dataclass
class Engines:
    prefill: SimEngine
    decode: SimEngine
    union: SimEngine
    encodes: list[SimEngine]

    @property
    def all(self) -> list[SimEngine]:
        return [self.prefill, self.decode, self.union, *self.encodes]

    def serving(self, profile: str) -> list[Any]:
        if profile == "aggregated":
            return [sim_instance(self.union, "union")]
        return [sim_instance(self.prefill, "prefill"), sim_instance(self.decode, "decode")]


@pytest.fixture(scope="module")
def module_engines(
    shared_mooncake_master: RunningPool, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Engines]:
    store = shared_mooncake_master.store_config
    with stopping_factory(start_sim_engine, tmp_path_factory.mktemp("coordinator-encode")) as start:
        encodes = ({"kv_role": "kv_both", "engine_id": f"encode-{i}"} for i in range(2))
        started = start_prefill_decode_union(start, store, *encodes)
        yield Engines(*started[:3], encodes=started[3:])


@pytest.fixture
def engines(module_engines: Engines) -> Iterator[Engines]:
    yield module_engines
    for engine in module_engines.all:
        set_engine_faults(engine, **NO_FAULTS)
    for engine in module_engines.all:
        wait_engine_idle(engine)


def answered(engines: Iterable[SimEngine]) -> float:
    return sum(engine_metric(e, ANSWERED) for e in engines)


def fired_errors(engines: Iterable[SimEngine]) -> float:
    return sum(engine_metric(e, 'motor_sim_faults_fired_total{fault="error_rate"}') for e in engines)


def start(
    coordinators: StartCoordinator, engines: Engines, profile: str, encodes: list[SimEngine]
) -> CoordinatorProcess:
    coordinator = coordinators(profile=profile, coordinator_config=FAST_FAILURE)
    coordinator.register([*engines.serving(profile), *(sim_instance(e, "encode") for e in encodes)])
    return coordinator


def assert_answer(response: httpx.Response, stream: bool) -> None:
    assert response.status_code == 200, response.text
    if stream:
        chunks = sse_chunks(response.text)
        assert response.text.endswith("data: [DONE]\n\n")
        assert chunks[-1]["usage"]["completion_tokens"] == 6
    else:
        assert response.json()["usage"]["completion_tokens"] == 6


@pytest.mark.parametrize("profile", PROFILES)
async def test_an_image_request_makes_one_encode_leg_then_its_flow(
    engines: Engines, coordinators: StartCoordinator, profile: str
) -> None:
    coordinator = start(coordinators, engines, profile, engines.encodes)
    serving = [engines.union] if profile == "aggregated" else [engines.prefill, engines.decode]
    async with httpx.AsyncClient(base_url=coordinator.base_url, timeout=30) as http:
        for number, stream in enumerate((False, True), start=1):
            encoded_before, served_before = answered(engines.encodes), answered(serving)
            assert_answer(
                await http.post("/v1/chat/completions", json=chat(image=True, stream=stream)), stream
            )
            assert answered(engines.encodes) - encoded_before == 1
            assert answered(serving) - served_before == len(serving), "P and D (or the union) served it"
            assert (
                coordinator_metric(coordinator, 'motor_coordinator_encode_legs_total{outcome="done"}')
                == number
            )
        encoded_before, served_before = answered(engines.encodes), answered(serving)
        assert_answer(await http.post("/v1/chat/completions", json=chat(image=False)), False)
        assert answered(engines.encodes) == encoded_before, "a text request never touches an encode instance"
        assert answered(serving) - served_before == len(serving)
        health = (await http.get("/health")).json()
    assert health["instances"]["encode"] == 2
    assert coordinator_metric(coordinator, 'motor_coordinator_encode_legs_total{outcome="done"}') == 2
    assert coordinator_metric(coordinator, 'motor_coordinator_leg_seconds_count{leg="encode"}') == 2


async def test_a_failing_encode_is_retried_on_the_other(
    engines: Engines, coordinators: StartCoordinator
) -> None:
    failing, healthy = engines.encodes
    set_engine_faults(failing, error_rate=1.0)
    errors_before, healthy_before = fired_errors([failing]), answered([healthy])
    coordinator = start(coordinators, engines, "prefill_first", engines.encodes)
    async with httpx.AsyncClient(base_url=coordinator.base_url, timeout=30) as http:
        for stream in (False, True, False, True):
            assert_answer(
                await http.post("/v1/chat/completions", json=chat(image=True, stream=stream)), stream
            )
    errors = fired_errors([failing]) - errors_before
    assert errors >= 1, "the least loaded pick alternates: some request tried the failing encode first"
    assert answered([healthy]) - healthy_before == 4
    retried = 'motor_coordinator_retries_total{role="encode",reason="http_500"}'
    assert coordinator_metric(coordinator, retried) == errors
    assert coordinator_metric(coordinator, 'motor_coordinator_encode_legs_total{outcome="failed"}') == errors


@pytest.mark.parametrize("stream", [False, True])
async def test_the_only_encode_failing_is_a_clear_error(
    engines: Engines, coordinators: StartCoordinator, stream: bool
) -> None:
    only = engines.encodes[0]
    set_engine_faults(only, error_rate=1.0)
    errors_before = fired_errors([only])
    coordinator = start(coordinators, engines, "prefill_first", [only])
    prefilled_before = answered([engines.prefill])
    async with httpx.AsyncClient(base_url=coordinator.base_url, timeout=30) as http:
        response = await http.post("/v1/chat/completions", json=chat(image=True, stream=stream))
        assert response.status_code == 502, response.text
        error = response.json()["error"]
        assert error["code"] == "http_500" and error["type"] == "upstream_error"
        assert f"encode instance {only.engine_id}" in error["message"]
        assert "gave up after 3 attempts" in error["message"]
        assert answered([engines.prefill]) == prefilled_before, "no prefill leg without its encode leg"
        assert fired_errors([only]) - errors_before == 3  # max_retry 2: every attempt tried the only encode
        assert_answer(await http.post("/v1/chat/completions", json=chat(image=False)), False)


async def test_without_a_routable_encode_images_wait_or_go_to_the_prefill(
    engines: Engines, coordinators: StartCoordinator
) -> None:
    coordinator = coordinators(profile="prefill_first", coordinator_config=FAST_FAILURE)
    inactive = sim_instance(engines.encodes[0], "encode", status="inactive")
    coordinator.register([*engines.serving("prefill_first"), inactive])
    encoded_before = answered(engines.encodes)
    async with httpx.AsyncClient(base_url=coordinator.base_url, timeout=30) as http:
        health = await http.get("/health")
        assert health.status_code == 200 and health.json()["instances"]["encode"] == 0
        waited = await http.post("/v1/chat/completions", json=chat(image=True))
        assert waited.status_code == 503, waited.text
        assert waited.json()["error"]["code"] == "no_encode_instance"
        assert_answer(await http.post("/v1/chat/completions", json=chat(image=False)), False)
        coordinator.register(engines.serving("prefill_first"))  # plain PD: no encode instance at all
        assert_answer(await http.post("/v1/chat/completions", json=chat(image=True)), False)
    assert answered(engines.encodes) == encoded_before


def test_the_encode_leg_is_a_span_of_its_attempt(engines: Engines, coordinators: StartCoordinator) -> None:
    with otlp_receiver("grpc") as receiver:
        coordinator = coordinators(
            profile="prefill_first",
            coordinator_config={**FAST_FAILURE, "tracer_config": {"endpoint": receiver.endpoint}},
            env={"OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"},
        )
        coordinator.register([*engines.serving("prefill_first"), sim_instance(engines.encodes[0], "encode")])
        trace_id = secrets.token_hex(16)
        traceparent = f"00-{trace_id}-{secrets.token_hex(8)}-01"
        response = httpx.post(
            f"{coordinator.base_url}/v1/chat/completions",
            json=chat(image=True),
            headers={"traceparent": traceparent},
            timeout=30,
        )
        assert_answer(response, False)
        spans = receiver.wait_for(lambda got: len([s for s in got if s.trace_id == trace_id]) >= 5)
    trace = [s for s in spans if s.trace_id == trace_id]
    (attempt,) = [s for s in trace if s.name == "attempt"]
    legs = {s.name: s for s in trace if s.parent_span_id == attempt.span_id}
    assert set(legs) == {"encode", "prefill", "decode"}
    encode = legs["encode"].attributes
    assert encode["motor.instance_id"] == engines.encodes[0].engine_id and encode["motor.leg.state"] == "DONE"
    assert (encode["motor.encode.items"], encode["motor.encode.score"]) == (1, 2 * 3)
