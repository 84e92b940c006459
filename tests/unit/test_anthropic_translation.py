"""Anthropic Messages ↔ OpenAI chat, both ways: requests, messages, streams and errors, checked against the
official anthropic client's own types where it has them."""

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import pytest
from anthropic.types import Message, RawMessageStreamEvent
from pydantic import TypeAdapter

from motor.coordinator.api.anthropic import (
    AnthropicSend,
    MessageStream,
    error_from_openai,
    message_from_chat,
    to_chat,
)
from motor.coordinator.http.errors import HttpError

EVENTS: TypeAdapter[RawMessageStreamEvent] = TypeAdapter(RawMessageStreamEvent)


def test_a_request_with_system_text_and_image_becomes_a_chat_request() -> None:
    chat = to_chat(
        {
            "model": "m",
            "max_tokens": 16,
            "system": [{"type": "text", "text": "be brief"}, {"type": "text", "text": "be kind"}],
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [{"type": "text", "text": "hello"}]},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "what is this?"},
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": "AAA="},
                        },
                        {"type": "image", "source": {"type": "url", "url": "http://127.0.0.1/x.png"}},
                    ],
                },
            ],
            "stop_sequences": ["END"],
            "temperature": 0.5,
            "top_k": 3,
            "metadata": {"user_id": "u"},
        }
    )
    assert chat == {
        "model": "m",
        "max_tokens": 16,
        "messages": [
            {"role": "system", "content": "be brief\nbe kind"},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA="}},
                    {"type": "image_url", "image_url": {"url": "http://127.0.0.1/x.png"}},
                ],
            },
        ],
        "temperature": 0.5,
        "top_k": 3,
        "stop": ["END"],
        "stream": False,
    }


def test_a_streamed_request_asks_for_the_usage_and_the_prompt_ids() -> None:
    chat = to_chat(
        {"model": "m", "max_tokens": 4, "stream": True, "messages": [{"role": "user", "content": "x"}]}
    )
    assert chat["stream_options"] == {"include_usage": True} and chat["return_token_ids"] is True


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m", "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
        ({"model": "m", "max_tokens": 1, "messages": []}, "messages"),
        (
            {"model": "m", "max_tokens": 1, "messages": [{"role": "system", "content": "x"}]},
            "messages[0].role",
        ),
        (
            {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": 3}]},
            "messages[0].content",
        ),
        (
            {
                "model": "m",
                "max_tokens": 1,
                "messages": [{"role": "user", "content": [{"type": "document"}]}],
            },
            "messages[0].content[0]",
        ),
        (
            {
                "model": "m",
                "max_tokens": 1,
                "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": 3}]}],
            },
            "messages[0].content[0].tool_use_id",
        ),
        (
            {
                "model": "m",
                "max_tokens": 1,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "image"}]}
                        ],
                    }
                ],
            },
            "messages[0].content[0].content[0]",
        ),
        (
            {
                "model": "m",
                "max_tokens": 1,
                "messages": [{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f"}]}],
            },
            "messages[0].content[0]",
        ),
        (
            {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}], "tools": {}},
            "tools",
        ),
        (
            {
                "model": "m",
                "max_tokens": 1,
                "messages": [{"role": "user", "content": "x"}],
                "tools": [{"type": "web_search_20250305", "name": "web_search"}],
            },
            "tools[0]",
        ),
        (
            {
                "model": "m",
                "max_tokens": 1,
                "messages": [{"role": "user", "content": "x"}],
                "tools": [{"name": "f"}],
            },
            "tools[0]",
        ),
        (
            {
                "model": "m",
                "max_tokens": 1,
                "messages": [{"role": "user", "content": "x"}],
                "tool_choice": {"type": "tool"},
            },
            "tool_choice",
        ),
        (
            {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}], "bogus": 1},
            "bogus",
        ),
        (
            {
                "model": "m",
                "max_tokens": 1,
                "messages": [{"role": "user", "content": "x"}],
                "stop_sequences": "x",
            },
            "stop_sequences",
        ),
        (
            {"model": "m", "max_tokens": 1, "system": 5, "messages": [{"role": "user", "content": "x"}]},
            "system",
        ),
        (
            {
                "model": "m",
                "max_tokens": 1,
                "messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "file"}}]}],
            },
            "messages[0].content[0].source",
        ),
    ],
)
def test_what_cannot_be_carried_is_a_400_naming_the_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(HttpError) as refused:
        to_chat(body)
    assert refused.value.status == 400 and refused.value.param == param


def test_a_chat_completion_becomes_a_message_the_client_reads() -> None:
    chat = {
        "id": "chatcmpl-abc",
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hi there"}, "finish_reason": "length"}
        ],
        "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9},
    }
    message = Message.model_validate(message_from_chat(chat))
    assert message.id == "msg_abc" and message.content[0].text == "hi there"  # type: ignore[union-attr]
    assert message.stop_reason == "max_tokens"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (7, 2)
    stopped = chat | {
        "choices": [{"message": {"content": "a"}, "finish_reason": "stop", "stop_reason": "END"}]
    }
    assert message_from_chat(stopped)["stop_reason"] == "stop_sequence"
    assert message_from_chat(stopped)["stop_sequence"] == "END"


def sse(*chunks: dict[str, Any] | str) -> bytes:
    return b"".join(
        b"data: " + (c.encode() if isinstance(c, str) else json.dumps(c).encode()) + b"\n\n" for c in chunks
    )


def parse_events(raw: bytes) -> list[Any]:
    events = []
    for block in raw.decode().split("\n\n"):
        if not block:
            continue
        kind, data = block.split("\n")
        assert kind.startswith("event: ")
        payload = json.loads(data.removeprefix("data: "))
        if payload == {"type": "ping"}:  # not a stream event type of the client's: it skips pings
            events.append(SimpleNamespace(type="ping"))
            continue
        parsed = EVENTS.validate_python(payload)
        assert parsed.type == kind.removeprefix("event: ")
        events.append(parsed)
    return events


def test_a_chat_stream_becomes_anthropics_events() -> None:
    stream = MessageStream()
    first = stream.feed(
        sse(
            {
                "id": "chatcmpl-9",
                "model": "m",
                "prompt_token_ids": [1, 2, 3],
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "token_ids": []}],
            },
            {
                "id": "chatcmpl-9",
                "model": "m",
                "choices": [{"index": 0, "delta": {"content": "Hel"}, "token_ids": [5]}],
            },
        )
    )
    rest = stream.feed(
        sse(
            {
                "id": "chatcmpl-9",
                "choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}],
            },
            {"id": "chatcmpl-9", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}},
            "[DONE]",
        )
    )
    events = parse_events(first + rest)
    assert [e.type for e in events] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[0].message.id == "msg_9" and events[0].message.usage.input_tokens == 3
    assert "".join(e.delta.text for e in events if e.type == "content_block_delta") == "Hello"
    assert events[6].delta.stop_reason == "end_turn" and events[6].usage.output_tokens == 2
    assert stream.feed(sse({"choices": [{"delta": {"content": "late"}}]})) == b"", "nothing after the end"


WEATHER = {
    "name": "get_weather",
    "description": "the weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def test_tools_tool_use_and_tool_results_become_chat_tools_calls_and_tool_messages() -> None:
    chat = to_chat(
        {
            "model": "m",
            "max_tokens": 8,
            "tools": [WEATHER | {"cache_control": {"type": "ephemeral"}}],
            "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
            "messages": [
                {"role": "user", "content": "weather in Paris?"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "Let me look."},
                        {
                            "type": "tool_use",
                            "id": "toolu_1",
                            "name": "get_weather",
                            "input": {"city": "Paris"},
                        },
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                        {
                            "type": "tool_result",
                            "tool_use_id": "toolu_2",
                            "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                            "is_error": True,
                        },
                        {"type": "text", "text": "and tomorrow?"},
                    ],
                },
            ],
        }
    )
    assert chat["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": WEATHER["input_schema"],
                "description": "the weather in a city",
            },
        }
    ]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert chat["parallel_tool_calls"] is False
    assert chat["messages"][1:] == [
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "ab"},
        {"role": "user", "content": "and tomorrow?"},
    ]
    only_call = to_chat(
        {
            "model": "m",
            "max_tokens": 8,
            "messages": [
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]},
            ],
        }
    )
    assert only_call["messages"][1]["content"] is None
    assert only_call["messages"][2:] == [{"role": "tool", "tool_call_id": "t", "content": ""}]


@pytest.mark.parametrize(
    ("choice", "chat_choice"),
    [({"type": "auto"}, "auto"), ({"type": "any"}, "required"), ({"type": "none"}, "none")],
)
def test_tool_choices(choice: dict[str, Any], chat_choice: str) -> None:
    chat = to_chat(
        {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}], "tool_choice": choice}
    )
    assert chat["tool_choice"] == chat_choice and "parallel_tool_calls" not in chat


def test_a_tool_call_answer_becomes_tool_use_blocks() -> None:
    chat = {
        "id": "chatcmpl-3",
        "model": "m",
        "choices": [
            {
                "message": {
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "chatcmpl-tool-1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                        }
                    ],
                },
                "finish_reason": "stop",  # vLLM's answer to a named tool_choice
            }
        ],
        "usage": {"prompt_tokens": 9, "completion_tokens": 6},
    }
    message = Message.model_validate(message_from_chat(chat))
    (block,) = message.content
    assert block.type == "tool_use" and block.name == "get_weather" and block.input == {"city": "Oslo"}
    assert block.id == "chatcmpl-tool-1" and message.stop_reason == "tool_use"
    broken = json.loads(json.dumps(chat))
    broken["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = "[1]"
    with pytest.raises(ValueError):
        message_from_chat(broken)
    cut = json.loads(json.dumps(chat))
    cut["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = '{"ci'
    with pytest.raises(ValueError):
        message_from_chat(cut)
    cut["choices"][0]["finish_reason"] = "length"
    truncated = Message.model_validate(message_from_chat(cut))
    assert truncated.content[0].input == {} and truncated.stop_reason == "max_tokens"  # type: ignore[union-attr]


def test_a_streamed_tool_call_becomes_a_tool_use_block_with_json_deltas() -> None:
    stream = MessageStream()
    call = {"index": 0, "id": "chatcmpl-tool-7", "type": "function", "function": {"name": "get_weather"}}
    raw = stream.feed(
        sse(
            {"id": "chatcmpl-4", "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant"}}]},
            {"id": "chatcmpl-4", "choices": [{"index": 0, "delta": {"content": "Sure."}}]},
            {"id": "chatcmpl-4", "choices": [{"index": 0, "delta": {"tool_calls": [call]}}]},
            {
                "id": "chatcmpl-4",
                "choices": [
                    {"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"ci'}}]}}
                ],
            },
            {
                "id": "chatcmpl-4",
                "choices": [
                    {
                        "index": 0,
                        "delta": {"tool_calls": [{"index": 0, "function": {"arguments": 'ty": "Rome"}'}}]},
                        "finish_reason": "tool_calls",
                    }
                ],
            },
            {"id": "chatcmpl-4", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 9}},
            "[DONE]",
        )
    )
    events = parse_events(raw)
    assert [(e.type, getattr(e, "index", None)) for e in events] == [
        ("message_start", None),
        ("ping", None),
        ("content_block_start", 0),
        ("content_block_delta", 0),
        ("content_block_stop", 0),
        ("content_block_start", 1),
        ("content_block_delta", 1),
        ("content_block_delta", 1),
        ("content_block_stop", 1),
        ("message_delta", None),
        ("message_stop", None),
    ]
    tool = events[5].content_block
    assert tool.type == "tool_use" and tool.id == "chatcmpl-tool-7" and tool.name == "get_weather"
    assert json.loads("".join(e.delta.partial_json for e in events[6:8])) == {"city": "Rome"}
    assert events[9].delta.stop_reason == "tool_use"


def test_an_error_event_after_output_ends_the_block_with_an_error() -> None:
    stream = MessageStream()
    raw = stream.feed(
        sse(
            {"id": "c", "choices": [{"delta": {"content": "a"}}]},
            {"error": {"message": "the engine died", "type": "upstream_error", "code": "upstream_failed"}},
            "[DONE]",
        )
    )
    kinds = [block.split("\n")[0] for block in raw.decode().split("\n\n") if block]
    assert kinds[-2:] == ["event: content_block_stop", "event: error"]
    error = json.loads(raw.decode().split("\n\n")[-2].split("\n")[1].removeprefix("data: "))
    assert error == {"type": "error", "error": {"type": "api_error", "message": "the engine died"}}


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (404, "not_found_error"),
        (429, "rate_limit_error"),
        (503, "overloaded_error"),
        (502, "api_error"),
    ],
)
def test_openai_errors_in_anthropics_shape(status: int, kind: str) -> None:
    body = json.dumps({"error": {"message": "no", "type": "x", "param": None, "code": None}}).encode()
    assert json.loads(error_from_openai(status, body)) == {
        "type": "error",
        "error": {"type": kind, "message": "no"},
    }
    assert (
        json.loads(error_from_openai(status, b'{"object": "error", "message": "vllm says"}'))["error"][
            "message"
        ]
        == "vllm says"
    )


def test_the_send_wrapper_fixes_the_length_of_a_translated_answer() -> None:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def answer() -> None:
        wrapper = AnthropicSend(send)
        body = json.dumps(
            {
                "id": "chatcmpl-1",
                "model": "m",
                "choices": [{"message": {"content": "x"}, "finish_reason": "stop"}],
            }
        ).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", b"%d" % len(body)),
            (b"x-request-id", b"r"),
        ]
        await wrapper({"type": "http.response.start", "status": 200, "headers": headers})
        await wrapper({"type": "http.response.body", "body": body})

    asyncio.run(answer())
    start, body = sent
    headers = dict(start["headers"])
    assert headers[b"content-length"] == b"%d" % len(body["body"]) and headers[b"x-request-id"] == b"r"
    assert Message.model_validate_json(body["body"]).content[0].text == "x"  # type: ignore[union-attr]
