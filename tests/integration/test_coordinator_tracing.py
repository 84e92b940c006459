"""Traces (tracer_config) into a real OTLP receiver, over gRPC and over HTTP/protobuf: a PD request continues the
client's `traceparent` and yields one trace — the coordinator's request span, an attempt span, the prefill and
decode leg spans, and each sim engine's `llm_request` span as the child of the leg that reached it (as vLLM's
--otlp-traces-endpoint gives). The sampling rates decide per case: no parent, a sampled or a not-sampled one."""

import os
import secrets
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.fixtures.coordinator import CoordinatorProcess, StartCoordinator, sim_instance
from tests.fixtures.otlp import OtlpReceiver, ReceivedSpan, otlp_receiver
from tests.fixtures.pool import RunningPool
from tests.fixtures.processes import stopping_factory
from tests.fixtures.sim import SimEngine, fresh_prompt, start_ready_together, start_sim_engine

FAST_EXPORT = {"OTEL_BSP_SCHEDULE_DELAY": "100"}  # the batch processor's delay (ms; 5 s by default)


@pytest.fixture(scope="module", params=["grpc", "http/protobuf"])
def protocol(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def receiver(protocol: str) -> Iterator[OtlpReceiver]:
    with otlp_receiver(protocol) as running:
        yield running


@pytest.fixture(scope="module")
def engines(
    receiver: OtlpReceiver,
    protocol: str,
    shared_mooncake_master: RunningPool,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[list[SimEngine]]:
    store = shared_mooncake_master.store_config
    env = {**os.environ, **FAST_EXPORT, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": protocol}
    tracing = ["--otlp-traces-endpoint", receiver.endpoint]
    with stopping_factory(start_sim_engine, tmp_path_factory.mktemp("coordinator-tracing")) as start:
        yield start_ready_together(
            start,
            {
                "kv_role": "kv_producer",
                "engine_id": "prefill-0",
                "store_config": store,
                "extra_args": tracing,
                "env": env,
            },
            {
                "kv_role": "kv_consumer",
                "engine_id": "decode-0",
                "store_config": store,
                "extra_args": ["--kv-wait-timeout-s", "5", *tracing],
                "env": env,
            },
        )


def start(
    coordinators: StartCoordinator, engines: list[SimEngine], receiver: OtlpReceiver, **rates: float
) -> CoordinatorProcess:
    coordinator = coordinators(
        profile="prefill_first",
        coordinator_config={"tracer_config": {"endpoint": receiver.endpoint, **rates}},
        env={**FAST_EXPORT, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": receiver.protocol},
    )
    coordinator.register([sim_instance(engines[0], "prefill"), sim_instance(engines[1], "decode")])
    return coordinator


def ask(coordinator: CoordinatorProcess, traceparent: str | None = None, stream: bool = False) -> str:
    headers = {"traceparent": traceparent} if traceparent else {}
    body: dict[str, Any] = {
        "model": "sim-model",
        "max_tokens": 4,
        "stream": stream,
        "messages": [{"role": "user", "content": fresh_prompt(20)}],
    }
    response = httpx.post(
        f"{coordinator.base_url}/v1/chat/completions", json=body, headers=headers, timeout=30
    )
    assert response.status_code == 200, response.text
    return response.headers["x-request-id"]


def of_trace(spans: list[ReceivedSpan], trace_id: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.trace_id == trace_id]


@pytest.mark.parametrize("stream", [False, True])
def test_a_pd_request_is_one_trace_with_the_engines_spans(
    coordinators: StartCoordinator, engines: list[SimEngine], receiver: OtlpReceiver, stream: bool
) -> None:
    coordinator = start(coordinators, engines, receiver)
    trace_id, client_span = secrets.token_hex(16), secrets.token_hex(8)
    request_id = ask(coordinator, f"00-{trace_id}-{client_span}-01", stream=stream)

    spans = receiver.wait_for(
        lambda got: len([s for s in of_trace(got, trace_id) if s.name == "llm_request"]) == 2
    )
    spans = receiver.wait_for(lambda got: len(of_trace(got, trace_id)) >= 6)
    trace = {s.span_id: s for s in of_trace(spans, trace_id)}
    (request,) = [s for s in trace.values() if s.parent_span_id == client_span]
    assert request.service == "motor-coordinator" and request.name == "chat"
    assert request.attributes["motor.request_id"] == request_id
    assert request.attributes["http.response.status_code"] == 200
    assert (
        request.attributes["motor.profile"] == "prefill_first"
        and request.attributes["motor.stream"] is stream
    )
    assert request.attributes["motor.attempts"] == 1 and "first output" in request.events
    (attempt,) = [s for s in trace.values() if s.parent_span_id == request.span_id]
    assert attempt.name == "attempt" and attempt.attributes["motor.phase"] == "DONE"
    legs = {s.name: s for s in trace.values() if s.parent_span_id == attempt.span_id}
    assert set(legs) == {"prefill", "decode"}
    assert legs["prefill"].attributes["motor.instance_id"] == "prefill-0"
    assert legs["decode"].attributes["motor.instance_id"] == "decode-0"
    engine_spans = {trace[s.parent_span_id].name: s for s in trace.values() if s.name == "llm_request"}
    assert set(engine_spans) == {"prefill", "decode"}, "each engine's span is the child of its leg's span"
    assert engine_spans["prefill"].service == "motor-sim prefill-0"
    assert engine_spans["decode"].service == "motor-sim decode-0"
    assert not any(s.error for s in trace.values())


def test_the_sampling_rates_decide_per_parent(
    coordinators: StartCoordinator, engines: list[SimEngine], receiver: OtlpReceiver
) -> None:
    coordinator = start(
        coordinators,
        engines,
        receiver,
        root_sampling_rate=1e-9,
        remote_parent_sampled=1.0,
        remote_parent_not_sampled=1e-9,
        local_parent_not_sampled=1e-9,  # else the attempt and leg spans under a dropped request are sampled
    )
    unsampled_trace, sampled_trace = secrets.token_hex(16), secrets.token_hex(16)
    without_parent = ask(coordinator)
    ask(coordinator, f"00-{unsampled_trace}-{secrets.token_hex(8)}-00")
    ask(coordinator, f"00-{sampled_trace}-{secrets.token_hex(8)}-01")
    # the coordinator's spans of a request may come in several export batches: wait for all four
    spans = receiver.wait_for(
        lambda got: (
            len([s for s in got if s.trace_id == sampled_trace and s.service == "motor-coordinator"]) >= 4
            and len([s for s in got if s.trace_id == sampled_trace and s.name == "llm_request"]) == 2
        )
    )
    coordinator_spans = [s for s in spans if s.service == "motor-coordinator"]
    assert not [s for s in coordinator_spans if s.attributes.get("motor.request_id") == without_parent]
    assert not of_trace(spans, unsampled_trace), "a not-sampled parent at a rate of 1e-9 is not sampled"
    assert len([s for s in of_trace(spans, sampled_trace) if s.service == "motor-coordinator"]) == 4
