"""OpenAI request parsing and response bodies, field for field as vLLM's OpenAI server writes them."""

from dataclasses import dataclass
from typing import Any, Literal

from motor.engine.sim.config import SimConfig
from motor.engine.sim.engine import Sequence
from motor.engine.sim.errors import SimError, bad_request
from motor.engine.sim.multimodal import MODALITIES, MmItem, mm_item
from motor.tokenize.sim_vocab import VOCAB_SIZE, decode, decode_token, encode, render_chat

Endpoint = Literal["completion", "chat"]
SEED_MIN, SEED_MAX = -(2**63), 2**63 - 1
DEFAULT_COMPLETION_MAX_TOKENS = 16


@dataclass(frozen=True)
class ApiRequest:
    endpoint: Endpoint
    prompt_token_ids: list[int]
    max_tokens: int
    min_tokens: int
    ignore_eos: bool
    temperature: float | None
    seed: int | None
    stream: bool
    include_usage: bool
    return_token_ids: bool
    kv_transfer_params: Any
    mm_items: tuple[MmItem, ...]  # chat's image_url / video_url parts, in prompt order


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _optional_int(body: dict[str, Any], name: str, *, minimum: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not _is_int(value) or value < minimum:
        raise bad_request(f"{name} must be an integer >= {minimum}, got {value!r}", param=name)
    return value


def _flag(body: dict[str, Any], name: str) -> bool:
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise bad_request(f"{name} must be true or false, got {value!r}", param=name)
    return value


def _unsupported(body: dict[str, Any]) -> None:
    n = body.get("n")
    if n not in (None, 1):
        raise bad_request("motor-sim generates one choice per request: n must be 1", param="n")
    if body.get("best_of") not in (None, 1):
        raise bad_request("motor-sim does not support best_of", param="best_of")
    for name in ("echo", "use_beam_search", "logprobs", "prompt_logprobs", "top_logprobs"):
        if body.get(name):
            raise bad_request(f"motor-sim does not simulate {name}", param=name)


def _prompt_from_completion(body: dict[str, Any]) -> list[int]:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str):
        ids = encode(prompt)
    elif isinstance(prompt, list) and prompt and all(_is_int(token) for token in prompt):
        if any(not 0 <= token < VOCAB_SIZE for token in prompt):
            raise bad_request(f"prompt token ids must be in [0, {VOCAB_SIZE})", param="prompt")
        ids = list(prompt)
    elif prompt is None:
        raise bad_request("prompt is required", param="prompt")
    else:
        raise bad_request(
            "prompt must be a string or a list of token ids (one prompt per request)", param="prompt"
        )
    if not ids:
        raise bad_request("prompt must contain at least one token", param="prompt")
    return ids


def _content(content: Any, param: str) -> tuple[list[int], list[MmItem]]:
    """A message's content as token ids (text parts as if joined by newlines, each multimodal item as its
    placeholder tokens) and its multimodal items."""
    if content is None:
        return [], []
    if isinstance(content, str):
        return encode(content), []
    if not isinstance(content, list):
        raise bad_request(f"{param}.content must be a string or a list of content parts", param="messages")
    ids: list[int] = []
    items: list[MmItem] = []
    for index, part in enumerate(content):
        where = f"{param}.content[{index}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            ids += encode(part["text"])
        elif kind in MODALITIES:
            item = mm_item(part, where)
            items.append(item)
            ids += item.placeholder_ids()
        else:
            raise bad_request(
                f"{where}: motor-sim accepts text, image_url and video_url parts", param="messages"
            )
    return ids, items


def _prompt_from_chat(body: dict[str, Any]) -> tuple[list[int], tuple[MmItem, ...]]:
    """The ChatML prompt, tokenized turn by turn so multimodal items sit where their parts are. No piece of the
    sim's tokenizer spans whitespace or runs into `<|im_end|>`, so a text-only prompt gets the ids of its whole
    rendered text, as the coordinator's sim tokenizer computes them."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("messages is required: a non-empty list of {role, content}", param="messages")
    ids: list[int] = []
    items: list[MmItem] = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise bad_request(f"messages[{index}] must be an object with a string role", param="messages")
        content_ids, content_items = _content(message.get("content"), f"messages[{index}]")
        # the template's text around the content, split at a stand-in content: only the role can precede it
        head, _, tail = render_chat([(message["role"], "\0")], add_generation_prompt=False).rpartition("\0")
        ids += encode(head) + content_ids + encode(tail)
        items += content_items
    if body.get("add_generation_prompt", True) is not False:
        ids += encode(render_chat([], add_generation_prompt=True))
    return ids, tuple(items)


def parse_request(endpoint: Endpoint, body: Any, config: SimConfig) -> ApiRequest:
    """Validate an OpenAI body; raises SimError (400, or 404 for an unknown model) on a bad one."""
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    model = body.get("model")
    if model is not None and model not in config.served_model_names:
        raise SimError(404, f"The model `{model}` does not exist.", param="model")
    _unsupported(body)
    if endpoint == "completion":
        prompt, mm_items = _prompt_from_completion(body), ()
    else:
        prompt, mm_items = _prompt_from_chat(body)

    max_tokens = _optional_int(body, "max_completion_tokens", minimum=1)
    if max_tokens is None:
        max_tokens = _optional_int(body, "max_tokens", minimum=1)
    room = config.max_model_len - len(prompt)
    if max_tokens is None:
        max_tokens = DEFAULT_COMPLETION_MAX_TOKENS if endpoint == "completion" else room
    if room < 1 or max_tokens > room:
        raise bad_request(
            f"This model's maximum context length is {config.max_model_len} tokens. However, you requested "
            f"{len(prompt) + max_tokens} tokens ({len(prompt)} in the prompt, {max_tokens} in the completion). "
            "Please reduce the length of the prompt or completion.",
            param="max_tokens",
        )
    min_tokens = _optional_int(body, "min_tokens", minimum=0) or 0
    if min_tokens > max_tokens:
        raise bad_request(
            f"min_tokens ({min_tokens}) must not exceed max_tokens ({max_tokens})", param="min_tokens"
        )

    seed = body.get("seed")
    if seed is not None and not (_is_int(seed) and SEED_MIN <= seed <= SEED_MAX):
        raise bad_request("seed must be a 64-bit signed integer", param="seed")
    temperature = body.get("temperature")
    if temperature is not None and (
        isinstance(temperature, bool) or not isinstance(temperature, int | float)
    ):
        raise bad_request("temperature must be a number", param="temperature")
    if temperature is not None and temperature < 0:
        raise bad_request("temperature must be >= 0", param="temperature")

    stream = _flag(body, "stream")
    stream_options = body.get("stream_options")
    if stream_options is not None:
        if not stream:
            raise bad_request("stream_options can only be set when stream is true", param="stream_options")
        if not isinstance(stream_options, dict):
            raise bad_request("stream_options must be an object", param="stream_options")
    include_usage = _flag(stream_options or {}, "include_usage")

    return ApiRequest(
        endpoint=endpoint,
        prompt_token_ids=prompt,
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        ignore_eos=_flag(body, "ignore_eos"),
        temperature=temperature,
        seed=seed,
        stream=stream,
        include_usage=include_usage,
        return_token_ids=_flag(body, "return_token_ids"),
        kv_transfer_params=body.get("kv_transfer_params"),
        mm_items=mm_items,
    )


def response_id(endpoint: Endpoint, request_id: str) -> str:
    return f"{'cmpl' if endpoint == 'completion' else 'chatcmpl'}-{request_id}"


def usage(seq: Sequence) -> dict[str, Any]:
    prompt_tokens = len(seq.request.prompt_token_ids)
    completion_tokens = len(seq.output_token_ids)
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": {"cached_tokens": seq.cached_tokens},
    }


def full_response(api: ApiRequest, seq: Sequence, *, rid: str, created: int, model: str) -> dict[str, Any]:
    """The non-streaming body of /v1/completions or /v1/chat/completions."""
    text = decode(seq.output_token_ids)
    choice: dict[str, Any] = {"index": 0}
    if api.endpoint == "completion":
        choice.update(text=text, logprobs=None, finish_reason=seq.finish_reason, stop_reason=None)
        choice["prompt_logprobs"] = None
        if api.return_token_ids:
            choice["prompt_token_ids"] = seq.request.prompt_token_ids
            choice["token_ids"] = seq.output_token_ids
    else:
        choice["message"] = {"role": "assistant", "content": text, "refusal": None, "tool_calls": []}
        choice.update(logprobs=None, finish_reason=seq.finish_reason, stop_reason=None)
        if api.return_token_ids:
            choice["token_ids"] = seq.output_token_ids
    body: dict[str, Any] = {
        "id": response_id(api.endpoint, rid),
        "object": "text_completion" if api.endpoint == "completion" else "chat.completion",
        "created": created,
        "model": model,
        "choices": [choice],
        "usage": usage(seq),
    }
    if api.endpoint == "chat" and api.return_token_ids:
        body["prompt_token_ids"] = seq.request.prompt_token_ids
    body["kv_transfer_params"] = seq.kv_transfer_params
    return body


class ChunkWriter:
    """Builds the streamed chunks of one response."""

    def __init__(self, api: ApiRequest, seq: Sequence, *, rid: str, created: int, model: str) -> None:
        self._api = api
        self._seq = seq
        self._head = {
            "id": response_id(api.endpoint, rid),
            "object": "text_completion" if api.endpoint == "completion" else "chat.completion.chunk",
            "created": created,
            "model": model,
        }

    def opening(self) -> dict[str, Any] | None:
        """Chat opens with the assistant role (carrying prompt_token_ids when asked); completions do not."""
        if self._api.endpoint != "chat":
            return None
        choice = {
            "index": 0,
            "delta": {"role": "assistant", "content": ""},
            "logprobs": None,
            "finish_reason": None,
        }
        chunk = {**self._head, "choices": [choice]}
        if self._api.return_token_ids:
            chunk["prompt_token_ids"] = self._seq.request.prompt_token_ids
        return chunk

    def token(self, token_id: int, finish_reason: str | None, *, first: bool) -> dict[str, Any]:
        text = decode_token(token_id)
        choice: dict[str, Any] = {"index": 0}
        if self._api.endpoint == "completion":
            choice.update(text=text, logprobs=None, finish_reason=finish_reason, stop_reason=None)
            if self._api.return_token_ids:
                if first:
                    choice["prompt_token_ids"] = self._seq.request.prompt_token_ids
                choice["token_ids"] = [token_id]
        else:
            choice.update(
                delta={"content": text}, logprobs=None, finish_reason=finish_reason, stop_reason=None
            )
            if self._api.return_token_ids:
                choice["token_ids"] = [token_id]
        return {**self._head, "choices": [choice]}

    def usage(self) -> dict[str, Any]:
        return {**self._head, "choices": [], "usage": usage(self._seq)}
