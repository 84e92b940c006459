"""The replay ledger (`motor.coordinator.dispatch.replay`): what a stream's events become for the client, what
it records of them, and the completions request that continues it."""

import json
from typing import Any

import pytest

from motor.coordinator.client_request import parse_request
from motor.coordinator.dispatch.replay import RECOMPUTED, StreamLedger, arm, replay_refusal

MODELS = {"m"}


def event(chunk: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def chunks(events: bytes) -> list[dict[str, Any]]:
    return [json.loads(e[6:]) for e in events.split(b"\n\n") if e.startswith(b"data: {")]


def armed(api: str, body: dict[str, Any]) -> tuple[StreamLedger, dict[str, Any]]:
    request = parse_request(api, json.dumps(body).encode(), MODELS)  # type: ignore[arg-type]
    ledger = arm(request)
    return ledger, json.loads(request.raw)


CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True, "max_tokens": 5}


def chat_chunk(
    content: str | None, ids: list[int], finish: str | None = None, **extra: Any
) -> dict[str, Any]:
    delta = {"role": "assistant", "content": ""} if content is None else {"content": content}
    choice = {"index": 0, "delta": delta, "finish_reason": finish, "token_ids": ids}
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 7, "model": "m"}
    return head | {"choices": [choice]} | extra


def test_arming_asks_for_token_ids_and_the_client_never_sees_them() -> None:
    ledger, sent = armed("chat", CHAT)
    assert sent["return_token_ids"] is True
    events = event(chat_chunk(None, [], prompt_token_ids=[1, 2, 3])) + event(chat_chunk("a", [10]))
    out, signal = ledger.process(events)
    assert signal is None
    assert b"token_ids" not in out
    assert ledger.prompt_ids == [1, 2, 3] and ledger.generated == [10]


def test_a_client_that_asked_for_ids_keeps_them() -> None:
    ledger, _ = armed("chat", CHAT | {"return_token_ids": True})
    out, _ = ledger.process(
        event(chat_chunk(None, [], prompt_token_ids=[1, 2])) + event(chat_chunk("a", [10]))
    )
    first, second = chunks(out)
    assert first["prompt_token_ids"] == [1, 2] and second["choices"][0]["token_ids"] == [10]


def test_the_continuation_asks_for_what_is_left_from_prompt_plus_output() -> None:
    ledger, _ = armed("chat", CHAT | {"seed": 9, "temperature": 0.5, "min_tokens": 3, "tools": None})
    ledger.process(event(chat_chunk(None, [], prompt_token_ids=[1, 2])) + event(chat_chunk("ab", [10, 11])))
    assert ledger.remaining(None) == 3
    request = ledger.continuation(3)
    assert request.api == "completions" and request.stream
    assert request.body["prompt"] == [1, 2, 10, 11]
    assert request.body["max_tokens"] == 3 and request.body["min_tokens"] == 1
    assert request.body["seed"] == 9 and request.body["temperature"] == 0.5
    assert "messages" not in request.body and "tools" not in request.body
    assert request.demand.prompt_tokens == 4


def test_without_max_tokens_the_engines_context_length_bounds_the_continuation() -> None:
    ledger, _ = armed("completions", {"model": "m", "prompt": "x", "stream": True})
    ledger.process(
        event({"id": "c", "choices": [{"text": "a", "token_ids": [5], "prompt_token_ids": [1, 2]}]})
    )
    assert ledger.remaining(100) == 100 - 2 - 1


def test_continuation_chunks_are_spliced_in_as_chat_chunks_of_the_first_response() -> None:
    ledger, _ = armed("chat", CHAT | {"stream_options": {"include_usage": True}})
    ledger.process(event(chat_chunk(None, [], prompt_token_ids=[1, 2])) + event(chat_chunk("a", [10])))
    ledger.replays = 1
    continuation = {
        "id": "cmpl-2",
        "object": "text_completion",
        "created": 8,
        "model": "m",
        "choices": [{"index": 0, "text": "b", "token_ids": [11], "finish_reason": "length"}],
    }
    usage = {"id": "cmpl-2", "object": "text_completion", "created": 8, "model": "m", "choices": []}
    usage["usage"] = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
    out, signal = ledger.process(event(continuation) + event(usage) + b"data: [DONE]\n\n")
    assert signal is None
    spliced, tail = chunks(out)
    assert spliced["id"] == "chatcmpl-1" and spliced["object"] == "chat.completion.chunk"
    assert spliced["created"] == 7
    assert spliced["choices"][0]["delta"] == {"content": "b"} and "text" not in spliced["choices"][0]
    assert tail["usage"] == {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4}
    assert out.endswith(b"data: [DONE]\n\n")


@pytest.mark.parametrize("field", ["stop_reason", "finish_reason"])
def test_a_recomputed_end_and_an_error_event_ask_for_a_replay_and_are_not_sent(field: str) -> None:
    ledger, _ = armed("completions", {"model": "m", "prompt": "x", "stream": True, "max_tokens": 4})
    recomputed = {"id": "c", "choices": [{"text": "", "token_ids": [], field: RECOMPUTED}]}
    out, signal = ledger.process(
        event({"id": "c", "choices": [{"text": "a", "token_ids": [5]}]}) + event(recomputed)
    )
    assert signal == RECOMPUTED and len(chunks(out)) == 1
    error = event({"error": {"message": "engine died", "type": "x"}})
    out, signal = ledger.process(error + b"data: [DONE]\n\n")
    assert out == b"" and signal is not None and "engine died" in signal


def test_a_stream_that_was_complete_closes_with_usage_and_done() -> None:
    ledger, _ = armed(
        "completions",
        {"model": "m", "prompt": "x", "stream": True, "stream_options": {"include_usage": True}},
    )
    ledger.process(
        event(
            {
                "id": "c",
                "object": "text_completion",
                "created": 1,
                "model": "m",
                "choices": [
                    {"text": "a", "token_ids": [5], "prompt_token_ids": [1], "finish_reason": "stop"}
                ],
            }
        )
    )
    tail = ledger.closing()
    (usage,) = chunks(tail)
    assert usage["id"] == "c" and usage["usage"]["total_tokens"] == 2
    assert tail.endswith(b"data: [DONE]\n\n")


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ({"n": 2}, "several choices"),
        ({"logprobs": True}, "logprobs"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
        ({"response_format": {"type": "json_object"}}, "structured output"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
            "multimodal",
        ),
    ],
)
def test_what_a_replay_cannot_carry_is_refused(extra: dict[str, Any], reason: str) -> None:
    request = parse_request("chat", json.dumps(CHAT | extra).encode(), MODELS)
    refusal = replay_refusal(request)
    assert refusal is not None and reason in refusal


def test_a_plain_chat_request_can_be_armed() -> None:
    assert replay_refusal(parse_request("chat", json.dumps(CHAT).encode(), MODELS)) is None
