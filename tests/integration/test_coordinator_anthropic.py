"""Anthropic's Messages API through a real coordinator, driven by the official `anthropic` client: every
dispatch profile over sim engines and a real mooncake_master, streamed and not, with API keys sent as
`x-api-key`; the answer's text is the chat path's (the simulator's oracle decides both), usage counts what the
engines computed, and errors come back in Anthropic's shape with the right status."""

from collections.abc import Iterator
from dataclasses import dataclass

import anthropic
import httpx
import pytest

from tests.fixtures.coordinator import CoordinatorProcess, StartCoordinator, coordinator_metric, sim_instance
from tests.fixtures.pool import RunningPool
from tests.fixtures.processes import stopping_factory
from tests.fixtures.sim import SimEngine, fresh_prompt, start_prefill_decode_union, start_sim_engine

KEY = "anthropic-test-key"
AUTH = {"api_key_config": {"enable_api_key": True, "valid_keys": [KEY]}}
MAX_TOKENS = 8


@dataclass
class Engines:
    prefill: SimEngine
    decode: SimEngine
    union: SimEngine


@pytest.fixture(scope="module")
def engines(
    shared_mooncake_master: RunningPool, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Engines]:
    store = shared_mooncake_master.store_config
    with stopping_factory(start_sim_engine, tmp_path_factory.mktemp("coordinator-anthropic")) as start:
        yield Engines(*start_prefill_decode_union(start, store))


def start(coordinators: StartCoordinator, engines: Engines, profile: str) -> CoordinatorProcess:
    coordinator = coordinators(profile=profile, coordinator_config=AUTH)
    if profile == "aggregated":
        coordinator.register([sim_instance(engines.union, "union")])
    else:
        coordinator.register(
            [sim_instance(engines.prefill, "prefill"), sim_instance(engines.decode, "decode")]
        )
    return coordinator


@dataclass
class Reference:
    text: str
    prompt_tokens: int
    completion_tokens: int
    stop_reason: str


def chat_reference(coordinator: CoordinatorProcess, prompt: str, system: str) -> Reference:
    """The chat path's greedy answer to the same conversation."""
    response = httpx.post(
        f"{coordinator.base_url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {KEY}"},
        json={
            "model": "sim-model",
            "max_tokens": MAX_TOKENS,
            "temperature": 0,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": prompt}],
        },
        timeout=30,
    )
    assert response.status_code == 200, response.text
    body = response.json()
    choice, usage = body["choices"][0], body["usage"]
    stop = {"length": "max_tokens", "stop": "end_turn"}[choice["finish_reason"]]
    return Reference(choice["message"]["content"], usage["prompt_tokens"], usage["completion_tokens"], stop)


@pytest.mark.parametrize("profile", ["aggregated", "prefill_first", "decode_first", "concurrent"])
def test_the_official_client_through_every_profile(
    coordinators: StartCoordinator, engines: Engines, profile: str
) -> None:
    coordinator = start(coordinators, engines, profile)
    client = anthropic.Anthropic(api_key=KEY, base_url=coordinator.base_url, max_retries=0, timeout=30)
    prompt, system = fresh_prompt(30), "answer briefly"
    expected = chat_reference(coordinator, prompt, system)
    # the client no longer takes temperature itself: it goes as an extra body field
    conversation = {
        "system": system,
        "messages": [{"role": "user", "content": prompt}],
        "extra_body": {"temperature": 0},
    }

    message = client.messages.create(model="sim-model", max_tokens=MAX_TOKENS, **conversation)  # type: ignore[call-overload]
    assert message.type == "message" and message.role == "assistant" and message.model == "sim-model"
    assert message.id.startswith("msg_")
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == expected.text  # type: ignore[union-attr]
    assert message.stop_reason == expected.stop_reason
    assert (message.usage.input_tokens, message.usage.output_tokens) == (
        expected.prompt_tokens,
        expected.completion_tokens,
    )

    with client.messages.stream(model="sim-model", max_tokens=MAX_TOKENS, **conversation) as stream:  # type: ignore[arg-type]
        streamed_text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed_text == expected.text
    assert final.content[0].text == expected.text  # type: ignore[union-attr]
    assert final.stop_reason == expected.stop_reason
    assert (final.usage.input_tokens, final.usage.output_tokens) == (
        expected.prompt_tokens,
        expected.completion_tokens,
    )
    assert (
        coordinator_metric(coordinator, 'motor_coordinator_requests_total{route="messages",status="200"}')
        == 2
    )


def test_errors_come_back_in_anthropics_shape(coordinators: StartCoordinator, engines: Engines) -> None:
    coordinator = start(coordinators, engines, "aggregated")
    client = anthropic.Anthropic(api_key=KEY, base_url=coordinator.base_url, max_retries=0, timeout=30)
    user = [{"role": "user", "content": "hi"}]
    with pytest.raises(anthropic.NotFoundError) as missing:
        client.messages.create(model="no-such-model", max_tokens=4, messages=user)  # type: ignore[arg-type]
    assert missing.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    assert "no-such-model" in missing.value.body["error"]["message"]  # type: ignore[index]
    with pytest.raises(anthropic.BadRequestError) as server_tool:
        client.messages.create(
            model="sim-model",
            max_tokens=4,
            messages=user,  # type: ignore[arg-type]
            tools=[{"type": "web_search_20250305", "name": "web_search"}],  # type: ignore[list-item]
        )
    error = server_tool.value.body["error"]  # type: ignore[index]
    assert error["type"] == "invalid_request_error" and "server tools" in error["message"]
    wrong = anthropic.Anthropic(api_key="wrong", base_url=coordinator.base_url, max_retries=0, timeout=30)
    with pytest.raises(anthropic.PermissionDeniedError):
        wrong.messages.create(model="sim-model", max_tokens=4, messages=user)  # type: ignore[arg-type]
    response = httpx.post(f"{coordinator.base_url}/v1/messages", json={"model": "sim-model"}, timeout=10)
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"
    response = httpx.get(f"{coordinator.base_url}/v1/messages", headers={"x-api-key": KEY}, timeout=10)
    assert response.status_code == 405 and response.json()["type"] == "error"
    response = httpx.post(
        f"{coordinator.base_url}/v1/messages", headers={"x-api-key": KEY}, content=b"{not json", timeout=10
    )
    assert response.status_code == 400 and response.json()["error"]["type"] == "invalid_request_error"
