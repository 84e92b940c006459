"""Client request validation, leg shaping per docs/kv_transfer_params.md, SSE relaying helpers."""

import json

import pytest

from motor.config.models import InputConfig
from motor.coordinator.client_request import (
    DEFAULT_MAX_NEW_TOKENS,
    TRANSFER_FIELDS,
    nesting_exceeds,
    parse_request,
)
from motor.coordinator.dispatch.shaping import decode_body, prefill_body
from motor.coordinator.http.errors import HttpError
from motor.coordinator.http.sse import (
    DONE_EVENT,
    SseSplitter,
    carries_output,
    error_events,
    rewrite_usage_events,
    set_cached_tokens,
)
from tests.fixtures.hostile import HOSTILE_BODIES

MODELS = frozenset({"m"})


def parse(api: str, body: object) -> object:
    return parse_request(api, json.dumps(body).encode(), MODELS)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("api", "body", "param"),
    [
        ("completions", {"prompt": "x"}, "model"),
        ("completions", {"model": 3, "prompt": "x"}, "model"),
        ("completions", {"model": "m"}, "prompt"),
        ("completions", {"model": "m", "prompt": [1, "a"]}, "prompt"),
        ("completions", {"model": "m", "prompt": "x", "stream": "yes"}, "stream"),
        ("completions", {"model": "m", "prompt": "x", "max_tokens": 0}, "max_tokens"),
        ("completions", {"model": "m", "prompt": "x", "max_tokens": True}, "max_tokens"),
        ("completions", {"model": "m", "prompt": "x", "stream_options": []}, "stream_options"),
        ("chat", {"model": "m", "messages": []}, "messages"),
        ("chat", {"model": "m", "messages": [{"content": "hi"}]}, "messages[0]"),
        ("chat", {"model": "m", "messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ],
)
def test_invalid_requests_are_400_naming_the_field(api: str, body: dict, param: str) -> None:
    with pytest.raises(HttpError) as caught:
        parse(api, body)
    assert caught.value.status == 400
    assert caught.value.param == param
    error = json.loads(caught.value.body())["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"


def test_not_json_and_not_object_are_400() -> None:
    for raw in (b"{not json", b"[1, 2]", b"\xff\xfe"):
        with pytest.raises(HttpError) as caught:
            parse_request("completions", raw, MODELS)
        assert caught.value.status == 400


def test_unknown_model_is_404_listing_the_served_ones() -> None:
    with pytest.raises(HttpError) as caught:
        parse("completions", {"model": "other", "prompt": "x"})
    assert (
        caught.value.status == 404
        and caught.value.code == "model_not_found"
        and "served models: m" in caught.value.message
    )


def test_demand_estimates_prompt_tokens_and_output() -> None:
    chat = parse(
        "chat", {"model": "m", "messages": [{"role": "user", "content": "a" * 400}], "max_tokens": 7}
    )
    assert 100 <= chat.demand.prompt_tokens <= 103 and chat.demand.max_new_tokens == 7
    ids = parse("completions", {"model": "m", "prompt": [[1, 2, 3], [4]], "max_completion_tokens": 3})
    assert ids.demand.prompt_token_ids == [1, 2, 3, 4] and ids.demand.max_new_tokens == 3
    plain = parse("completions", {"model": "m", "prompt": ["ab", "cd"], "stream": True})
    assert plain.stream and plain.demand.max_new_tokens == DEFAULT_MAX_NEW_TOKENS
    parts = parse(
        "chat",
        {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]},
    )
    assert "hello" in parts.demand.prompt_text


def test_prefill_leg_shaping() -> None:
    client = {
        "model": "m",
        "prompt": "x",
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 50,
        "max_completion_tokens": 50,
        "temperature": 0.3,
    }
    params = {"do_remote_decode": True, "do_remote_prefill": False}
    shaped = json.loads(prefill_body(client, params, bootstrap_room=5))
    assert shaped == {
        "model": "m",
        "prompt": "x",
        "stream": False,
        "max_tokens": 1,
        "max_completion_tokens": 1,
        "min_tokens": 1,
        "temperature": 0.3,
        "kv_transfer_params": params,
        "bootstrap_room": 5,
    }
    without = json.loads(prefill_body({"model": "m", "prompt": "x"}, None))
    assert "max_completion_tokens" not in without and "kv_transfer_params" not in without
    assert client["stream"] is True and client["max_tokens"] == 50, "the client's body is not modified"


def test_decode_leg_gets_the_client_body_plus_exactly_the_prefill_params() -> None:
    client = {"model": "m", "prompt": "x", "stream": True, "max_tokens": 9, "kv_transfer_params": {"evil": 1}}
    returned = {"do_remote_prefill": True, "remote_engine_id": "p0", "remote_block_keys": ["k"]}
    assert json.loads(decode_body(client, returned)) == {**client, "kv_transfer_params": returned}
    assert "kv_transfer_params" not in json.loads(decode_body(client, None)), "omitted when P returned none"


def test_sse_splitter_relays_whole_events_only() -> None:
    splitter = SseSplitter()
    assert splitter.feed(b'data: {"a"') == b""
    assert splitter.feed(b': 1}\n\ndata: {"b": 2}\n') == b'data: {"a": 1}\n\n'
    assert splitter.feed(b"\n" + DONE_EVENT) == b'data: {"b": 2}\n\n' + DONE_EVENT
    assert splitter.done and splitter.events == 3


def event(chunk: dict, separators: tuple[str, str] = (",", ":")) -> bytes:
    return b"data: " + json.dumps(chunk, separators=separators).encode()


def chat_choice(delta: dict, finish_reason: str | None = None) -> dict:
    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}


@pytest.mark.parametrize(
    "chunk",
    [
        {"id": "c", "choices": [chat_choice({"role": "assistant", "content": ""})]},
        {"id": "c", "choices": [chat_choice({"role": "assistant"})], "prompt_token_ids": [1, 2]},
        {"id": "c", "choices": [chat_choice({"content": ""})], "usage": {"prompt_tokens": 3}},
        {"id": "c", "choices": [{"index": 0, "text": "", "logprobs": None, "finish_reason": None}]},
    ],
)
def test_events_before_the_first_output_carry_none(chunk: dict) -> None:
    assert not carries_output(event(chunk))
    assert not carries_output(event(chunk, (", ", ": ")))
    assert not carries_output(b": keep-alive")


@pytest.mark.parametrize(
    "output",
    [
        event({"id": "c", "choices": [chat_choice({"role": "assistant", "content": "Hi"})]}),
        event({"id": "c", "choices": [chat_choice({"content": "Hi"})]}),
        event({"id": "c", "choices": [chat_choice({"content": ""}, finish_reason="length")]}),
        event({"id": "c", "choices": [chat_choice({"role": "assistant", "tool_calls": [{"id": "t"}]})]}),
        event({"id": "c", "choices": [chat_choice({"reasoning_content": "hm"})]}),
        event({"id": "c", "choices": [{"index": 0, "text": "", "token_ids": [7], "finish_reason": None}]}),
        event({"id": "c", "choices": [{"index": 0, "text": "a", "finish_reason": None}]}),
        event({"id": "c", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}),
        DONE_EVENT.rstrip(),
        b'data: {"choices": [{"text": ""}]',  # not JSON: passed on as it is
        b"event: custom\ndata: {}",
    ],
)
def test_tokens_finish_reasons_usage_and_unknown_events_are_output(output: bytes) -> None:
    assert carries_output(output)


def test_usage_rewrite_sets_the_prefill_cached_tokens() -> None:
    usage_event = (
        b'data: {"id": "x", "choices": [], "usage": {"prompt_tokens": 30, "completion_tokens": 2}}\n\n'
    )
    events = b'data: {"id": "x", "choices": [{"text": "a"}]}\n\n' + usage_event + DONE_EVENT
    rewritten = rewrite_usage_events(events, 16)
    chunks = [json.loads(e[6:]) for e in rewritten.split(b"\n\n") if e.startswith(b"data: {")]
    assert chunks[0] == {"id": "x", "choices": [{"text": "a"}]}
    assert chunks[1]["usage"] == {
        "prompt_tokens": 30,
        "completion_tokens": 2,
        "prompt_tokens_details": {"cached_tokens": 16},
    }
    assert rewritten.endswith(DONE_EVENT)
    response = {
        "usage": {"prompt_tokens": 3, "prompt_tokens_details": {"cached_tokens": 3, "audio_tokens": 0}}
    }
    set_cached_tokens(response, 0)
    assert response["usage"]["prompt_tokens_details"] == {"cached_tokens": 0, "audio_tokens": 0}


def test_error_events_end_the_stream_explicitly() -> None:
    events = error_events("engine died", "upstream_error", "upstream_failed")
    first, rest = events.split(b"\n\n", 1)
    assert json.loads(first[6:]) == {
        "error": {
            "message": "engine died",
            "type": "upstream_error",
            "param": None,
            "code": "upstream_failed",
        }
    }
    assert rest == DONE_EVENT


@pytest.mark.parametrize("raw", HOSTILE_BODIES.values(), ids=HOSTILE_BODIES.keys())
def test_hostile_bodies_are_400(raw: bytes) -> None:
    with pytest.raises(HttpError) as caught:
        parse_request("completions", raw, frozenset({"sim-model"}))
    assert caught.value.status == 400 and caught.value.type == "invalid_request_error"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_tokens", (1 << 20) + 1),
        ("max_completion_tokens", -1),
        ("max_completion_tokens", 2.0),
        ("n", 129),
        ("n", 0),
        ("best_of", 1000),
        ("best_of", "2"),
    ],
)
def test_counts_out_of_bounds_are_400_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(HttpError) as caught:
        parse_request("completions", json.dumps({"model": "m", "prompt": "x", field: value}).encode(), MODELS)
    assert (caught.value.status, caught.value.param) == (400, field)


def test_bounds_follow_input_config() -> None:
    limits = InputConfig(max_tokens=10, max_n=2, max_list_items=3, max_json_depth=4)
    body = {"model": "m", "prompt": "x", "max_tokens": 10, "n": 2, "extra": [[[1]]]}
    assert parse_request("completions", json.dumps(body).encode(), MODELS, limits).demand.max_new_tokens == 10
    for change, param in (
        ({"max_tokens": 11}, "max_tokens"),
        ({"n": 3}, "n"),
        ({"prompt": ["a", "b", "c", "d"]}, "prompt"),
        ({"extra": [[[[1]]]]}, None),
    ):
        with pytest.raises(HttpError) as caught:
            parse_request("completions", json.dumps(body | change).encode(), MODELS, limits)
        assert (caught.value.status, caught.value.param) == (400, param)
    messages = [{"role": "user", "content": "hi"}] * 4
    with pytest.raises(HttpError) as caught:
        parse_request("chat", json.dumps({"model": "m", "messages": messages}).encode(), MODELS, limits)
    assert caught.value.param == "messages"
    parts = [{"role": "user", "content": [{"type": "text", "text": "a"}] * 4}]
    with pytest.raises(HttpError) as caught:
        parse_request(
            "chat",
            json.dumps({"model": "m", "messages": parts}).encode(),
            MODELS,
            InputConfig(max_list_items=3),
        )
    assert caught.value.param == "messages[0].content"
    tokens = {"model": "m", "prompt": list(range(100))}
    assert (
        len(parse_request("completions", json.dumps(tokens).encode(), MODELS, limits).demand.prompt_token_ids)
        == 100
    ), "one prompt of token ids is one item, however long"


def test_nesting_walk_counts_levels() -> None:
    assert not nesting_exceeds({"a": [1, {"b": []}]}, 4)
    assert nesting_exceeds({"a": [1, {"b": [[]]}]}, 4)
    assert not nesting_exceeds(5, 1)
    many_brackets_in_strings = {"model": "m", "prompt": "[[[[{{{{" * 100}
    assert parse("completions", many_brackets_in_strings).body == many_brackets_in_strings


@pytest.mark.parametrize("field", TRANSFER_FIELDS)
def test_client_transfer_fields_are_rejected_by_default(field: str) -> None:
    with pytest.raises(HttpError) as caught:
        parse("completions", {"model": "m", "prompt": "x", field: {"do_remote_prefill": True}})
    assert (caught.value.status, caught.value.param, caught.value.code) == (
        400,
        field,
        "unsupported_parameter",
    )


def test_client_transfer_fields_are_removed_when_configured_to_strip() -> None:
    body = {
        "model": "m",
        "prompt": "x",
        "kv_transfer_params": {"do_remote_prefill": True, "remote_bootstrap_addr": "http://10.0.0.1:1"},
        "bootstrap_host": "10.0.0.1",
        "temperature": 0.5,
    }
    request = parse_request(
        "completions", json.dumps(body).encode(), MODELS, InputConfig(kv_transfer_params="strip")
    )
    assert request.body == {"model": "m", "prompt": "x", "temperature": 0.5}
    assert json.loads(request.raw) == request.body, "the aggregated path forwards `raw`: it is stripped too"
    clean = json.dumps({"model": "m", "prompt": "x"}).encode()
    assert parse_request("completions", clean, MODELS).raw is clean, "a clean body is forwarded as it came"
