"""Where the encode leg enters the dispatch: the flow choice, the encode pick by outstanding encode score, and one
attempt's encode leg against small in-process engines on 127.0.0.1 (its body, phase, load, metrics, failure)."""

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from motor.coordinator.client_request import parse_request
from motor.coordinator.core import Core
from motor.coordinator.dispatch.dispatch import Dispatch
from motor.coordinator.dispatch.failures import LegFailure
from motor.coordinator.dispatch.flows import (
    AGGREGATED_ON_PREFILL,
    AGGREGATED_ON_UNION,
    ENCODED,
    PD_FLOWS,
    choose_flow,
)
from motor.coordinator.dispatch.states import LegState, Phase
from motor.coordinator.registry import Target
from motor.coordinator.scheduling.demand import Demand
from motor.coordinator.scheduling.profiles import PolicyName
from motor.coordinator.scheduling.scheduler import Scheduler
from motor.kv.connectors import DispatchProfile
from motor.protocol.instances import Endpoint, Instance, InstanceEvent
from tests.unit.test_coordinator_attempt import running_core
from tests.unit.test_coordinator_dispatch import registry

IMAGE_PART = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
POLICIES: list[PolicyName] = ["round_robin", "load_balance", "prefix_affinity", "pd_aware"]


def chat_request(image: bool, stream: bool = True) -> Any:
    content: list[dict[str, Any]] = [{"type": "text", "text": "describe"}, *([IMAGE_PART] if image else [])]
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": content}],
        "stream": stream,
        "max_tokens": 4,
    }
    return parse_request("chat", json.dumps(body).encode(), {"m"})


# ---- the flow choice ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("profile", list(DispatchProfile))
def test_images_run_the_encode_leg_first_in_every_flow_while_encode_is_routable(
    profile: DispatchProfile,
) -> None:
    for roles in (("prefill", "decode"), ("union",), ("prefill",)):
        base = choose_flow(profile, registry(*roles))
        assert base in (*PD_FLOWS.values(), AGGREGATED_ON_UNION, AGGREGATED_ON_PREFILL)
        with_encode = choose_flow(profile, registry(*roles, "encode"), True, chat_request(image=True))
        assert with_encode is ENCODED[base] and with_encode.pd == base.pd
        assert with_encode.name.startswith("encode, then ")
        assert choose_flow(profile, registry(*roles, "encode"), True, chat_request(image=False)) is base
        # no encode instance registered at all: plain PD, the prefill side encodes the images itself
        assert choose_flow(profile, registry(*roles), True, chat_request(image=True)) is base


def inactive_encode(*roles: str) -> Any:
    reg = registry(*roles)
    encode = Instance(
        id="encode-9",
        role="encode",
        engine_id="encode-9",
        model_name="m",
        endpoints=[Endpoint(host="127.0.0.1", port=9099)],
        status="inactive",
    )
    reg.apply(InstanceEvent(event="add", instances=[encode]))
    return reg


def test_registered_but_unroutable_encode_instances_make_image_requests_wait() -> None:
    reg = inactive_encode("prefill", "decode")
    assert (
        choose_flow(DispatchProfile.PREFILL_FIRST, reg, True, chat_request(image=False))
        is PD_FLOWS[DispatchProfile.PREFILL_FIRST]
    )
    with pytest.raises(LegFailure) as waited:
        choose_flow(DispatchProfile.PREFILL_FIRST, reg, True, chat_request(image=True))
    failure = waited.value
    assert (failure.role, failure.reason, failure.status, failure.retryable) == (
        "encode",
        "no_encode_instance",
        503,
        True,
    )
    circuits = registry("prefill", "decode", "encode")
    circuits.set_open_circuits(frozenset({"encode-2"}))
    with pytest.raises(LegFailure, match="no encode instance"):
        choose_flow(DispatchProfile.PREFILL_FIRST, circuits, True, chat_request(image=True))


# ---- the encode pick -----------------------------------------------------------------------------------------


def encode_targets(count: int) -> list[Target]:
    return [
        Target(
            f"encode-{i}@127.0.0.1:{9100 + i}",
            f"encode-{i}",
            "encode",
            f"encode-{i}",
            "m",
            "127.0.0.1",
            9100 + i,
            None,
        )
        for i in range(count)
    ]


@pytest.mark.parametrize("policy", POLICIES)
def test_the_encode_pick_is_the_least_outstanding_encode_score_under_every_policy(policy: PolicyName) -> None:
    scheduler = Scheduler(policy)
    targets = encode_targets(3)
    scheduler.set_targets(targets)
    demand = Demand(prompt_tokens=10, max_new_tokens=4)
    held = [scheduler.allocate(targets[0], 900, 0), scheduler.allocate(targets[1], 300, 0)]
    assert scheduler.pick("encode", demand) is targets[2]
    held.append(scheduler.allocate(targets[2], 600, 0))
    assert scheduler.pick("encode", demand) is targets[1]
    assert scheduler.pick("encode", demand, frozenset({"encode-1"})) is targets[2]
    held[0].release()
    assert scheduler.pick("encode", demand) is targets[0]
    assert not scheduler.saturated("encode"), "no admission bound: an encode leg never queues"
    for allocation in held:
        allocation.release()


# ---- one attempt's encode leg against in-process engines -------------------------------------------------------


class Engine:
    """An HTTP/1.1 engine on 127.0.0.1 that records each request body and answers `status` with a chat body."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.bodies: list[dict[str, Any]] = []
        self.server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.sockets[0].getsockname()[1]

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                self.bodies.append(json.loads(await reader.readexactly(length)))
                answer = json.dumps({"object": "chat.completion", "choices": []}).encode()
                writer.write(
                    b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%b"
                    % (self.status, len(answer), answer)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


@asynccontextmanager
async def engines(*statuses: int) -> AsyncIterator[list[Engine]]:
    started = [Engine(status) for status in statuses]
    for engine in started:
        await engine.start()
    try:
        yield started
    finally:
        for engine in started:
            assert engine.server is not None
            engine.server.close()


@pytest.fixture
def prometheus() -> Iterator[CollectorRegistry]:
    yield CollectorRegistry()


def register_encodes(core: Core, ports: list[int]) -> None:
    encodes = [
        Instance(
            id=f"encode-{i}",
            role="encode",
            engine_id=f"encode-{i}",
            model_name="m",
            endpoints=[Endpoint(host="127.0.0.1", port=port)],
        )
        for i, port in enumerate(ports)
    ]
    core.registry.apply(InstanceEvent(event="add", instances=encodes))


def sample(core: Core, prometheus: CollectorRegistry, name: str, **labels: str) -> float:
    core.metrics.flush()
    return prometheus.get_sample_value(name, labels) or 0.0


def encode_load(core: Core) -> list[float]:
    loads = core.scheduler.endpoint_load()
    return [load["tokens"] for key, load in sorted(loads.items()) if key.startswith("encode-")]


async def test_the_encode_leg_sends_the_one_token_body_and_releases_its_load(
    prometheus: CollectorRegistry,
) -> None:
    async with running_core(prometheus, {}) as core, engines(200) as (engine,):
        register_encodes(core, [engine.port])
        d = Dispatch(core.dispatch_context, chat_request(image=True), "req-e")
        attempt = d.new_attempt()
        await attempt.run_encode()
        assert attempt.phase is Phase.ENCODE
        leg = attempt.legs[0]
        assert (leg.role, leg.state, leg.client) == ("encode", LegState.DONE, False)
        assert attempt.client is None and attempt.prefill is None
        (body,) = engine.bodies
        assert body["stream"] is False and "stream_options" not in body
        assert (body["max_tokens"], body["min_tokens"], body["max_completion_tokens"]) == (1, 1, 1)
        assert body["messages"] == d.request.body["messages"]
        assert encode_load(core) == [0.0]
        assert sample(core, prometheus, "motor_coordinator_encode_legs_total", outcome="done") == 1
        assert sample(core, prometheus, "motor_coordinator_leg_seconds_count", leg="encode") == 1
        attempt.abandon("test over")


async def test_a_failed_encode_leg_is_the_attempts_cause_and_its_instance_is_avoided_next(
    prometheus: CollectorRegistry,
) -> None:
    config = {"exception_config": {"max_retry": 2, "retry_delay": 0.25, "infer_timeout": 60}}
    async with running_core(prometheus, config) as core, engines(500, 200) as (failing, healthy):
        register_encodes(core, [failing.port, healthy.port])
        d = Dispatch(core.dispatch_context, chat_request(image=True), "req-f")
        attempt = d.new_attempt()
        with pytest.raises(LegFailure) as failed:
            await attempt.run_encode()
        failure = failed.value
        assert (failure.role, failure.reason, failure.status) == ("encode", "http_500", 502)
        assert failure.target is not None and failure.target.instance_id == "encode-0"
        assert "encode instance encode-0" in failure.message
        assert attempt.fail(failure, core.retry_policy) == 0.25 and attempt.phase is Phase.RETRYING
        assert d.excluded("encode") == {"encode-0"} and encode_load(core) == [0.0, 0.0]
        retry = d.new_attempt()
        await retry.run_encode()
        assert len(failing.bodies) == 1 and len(healthy.bodies) == 1
        assert sample(core, prometheus, "motor_coordinator_encode_legs_total", outcome="failed") == 1
        assert (
            sample(core, prometheus, "motor_coordinator_retries_total", role="encode", reason="http_500") == 1
        )
        retry.abandon("test over")
