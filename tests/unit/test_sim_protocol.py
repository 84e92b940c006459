from typing import Any

import pytest

from motor.engine.sim.config import SimConfig
from motor.engine.sim.engine import GenerationRequest, Sequence
from motor.engine.sim.errors import SimError
from motor.engine.sim.openai_protocol import ApiRequest, ChunkWriter, Endpoint, full_response, parse_request
from motor.tokenize.sim_vocab import encode, render_chat

CONFIG = SimConfig(served_model_names=("tiny", "alias"), max_model_len=64)


def parse(endpoint: Endpoint, body: dict[str, Any]) -> ApiRequest:
    return parse_request(endpoint, body, CONFIG)


def test_completion_prompt_as_text_or_token_ids() -> None:
    assert parse("completion", {"prompt": "a b c"}).prompt_token_ids == encode("a b c")
    assert parse("completion", {"prompt": [5, 6, 7]}).prompt_token_ids == [5, 6, 7]
    assert parse("completion", {"prompt": ["a b"]}).prompt_token_ids == encode("a b")
    assert parse("completion", {"prompt": [[5, 6]]}).prompt_token_ids == [5, 6]


def test_chat_renders_messages_with_the_template() -> None:
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    assert parse("chat", body).prompt_token_ids == encode(render_chat([("user", "hi")]))


def test_max_tokens_defaults_and_precedence() -> None:
    assert parse("completion", {"prompt": "a"}).max_tokens == 16
    chat = parse("chat", {"messages": [{"role": "user", "content": "a"}]})
    assert chat.max_tokens == 64 - len(chat.prompt_token_ids)
    both = parse("completion", {"prompt": "a", "max_tokens": 3, "max_completion_tokens": 5})
    assert both.max_tokens == 5


def test_sampling_and_stream_fields() -> None:
    request = parse(
        "completion",
        {
            "model": "alias",
            "prompt": "a",
            "max_tokens": 4,
            "min_tokens": 2,
            "ignore_eos": True,
            "seed": -5,
            "temperature": 0.7,
            "stream": True,
            "stream_options": {"include_usage": True},
            "return_token_ids": True,
            "kv_transfer_params": {"do_remote_decode": True},
        },
    )
    assert (request.min_tokens, request.ignore_eos, request.seed, request.temperature) == (2, True, -5, 0.7)
    assert request.stream and request.include_usage and request.return_token_ids
    assert request.kv_transfer_params == {"do_remote_decode": True}


@pytest.mark.parametrize(
    ("endpoint", "body", "status", "param"),
    [
        ("completion", {}, 400, "prompt"),
        ("completion", {"prompt": ""}, 400, "prompt"),
        ("completion", {"prompt": [1, 99999]}, 400, "prompt"),
        ("completion", {"prompt": ["a", "b"]}, 400, "prompt"),
        ("completion", {"prompt": "a", "model": "gpt-4"}, 404, "model"),
        ("completion", {"prompt": "a", "max_tokens": 0}, 400, "max_tokens"),
        ("completion", {"prompt": "a", "max_tokens": 64}, 400, "max_tokens"),
        ("completion", {"prompt": "a", "max_tokens": 2, "min_tokens": 3}, 400, "min_tokens"),
        ("completion", {"prompt": "a", "n": 2}, 400, "n"),
        ("completion", {"prompt": "a", "logprobs": 1}, 400, "logprobs"),
        ("completion", {"prompt": "a", "seed": 2**64}, 400, "seed"),
        ("completion", {"prompt": "a", "stream_options": {"include_usage": True}}, 400, "stream_options"),
        ("completion", {"prompt": "a", "stream": "yes"}, 400, "stream"),
        ("chat", {"messages": []}, 400, "messages"),
        ("chat", {"messages": [{"content": "x"}]}, 400, "messages"),
        ("chat", {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400, "messages"),
    ],
)
def test_bad_requests_name_the_field(
    endpoint: Endpoint, body: dict[str, Any], status: int, param: str
) -> None:
    with pytest.raises(SimError) as error:
        parse(endpoint, body)
    assert (error.value.status, error.value.param) == (status, param)
    assert error.value.body()["error"]["code"] == status


def finished_sequence() -> Sequence:
    seq = Sequence(
        GenerationRequest(request_id="r1", prompt_token_ids=[5, 6, 7], max_tokens=2), cached_tokens=1
    )
    seq.output_token_ids = [100, 0]
    seq.finish_reason = "stop"
    return seq


def test_completion_body_has_vllm_fields() -> None:
    api = parse("completion", {"prompt": [5, 6, 7], "return_token_ids": True})
    body = full_response(api, finished_sequence(), rid="r1", created=1, model="tiny")
    assert body["id"] == "cmpl-r1" and body["object"] == "text_completion"
    choice = body["choices"][0]
    assert choice["prompt_token_ids"] == [5, 6, 7] and choice["token_ids"] == [100, 0]
    assert choice["finish_reason"] == "stop" and choice["text"].strip()
    assert body["usage"] == {
        "prompt_tokens": 3,
        "total_tokens": 5,
        "completion_tokens": 2,
        "prompt_tokens_details": {"cached_tokens": 1},
    }
    assert body["kv_transfer_params"] is None


def test_chat_body_puts_prompt_ids_at_the_top_like_vllm() -> None:
    api = parse("chat", {"messages": [{"role": "user", "content": "x"}], "return_token_ids": True})
    body = full_response(api, finished_sequence(), rid="r1", created=1, model="tiny")
    assert body["id"] == "chatcmpl-r1" and body["object"] == "chat.completion"
    assert body["prompt_token_ids"] == [5, 6, 7]
    assert body["choices"][0]["message"]["role"] == "assistant"
    assert body["choices"][0]["token_ids"] == [100, 0]


def test_stream_chunks() -> None:
    seq = finished_sequence()
    chat = ChunkWriter(
        parse("chat", {"messages": [{"role": "user", "content": "x"}]}), seq, rid="r", created=1, model="m"
    )
    assert chat.opening()["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chat.token(100, None, first=True)["choices"][0]["delta"]["content"].strip()
    completion_api = parse("completion", {"prompt": "x", "return_token_ids": True})
    completion = ChunkWriter(completion_api, seq, rid="r", created=1, model="m")
    assert completion.opening() is None
    first = completion.token(100, None, first=True)["choices"][0]
    assert first["prompt_token_ids"] == [5, 6, 7] and first["token_ids"] == [100]
    assert "prompt_token_ids" not in completion.token(0, "stop", first=False)["choices"][0]
    final = completion.usage()
    assert final["choices"] == [] and final["usage"]["completion_tokens"] == 2
