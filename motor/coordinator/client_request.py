"""Client request parsing and validation (→ 400 with an OpenAI error body) and its cost estimate.

Hostile bodies are answered with 400s, never 5xx: bodies that are not UTF-8 JSON, NaN/Infinity, numbers
out of a 64-bit range, nesting deeper than `input_config.max_json_depth`, out-of-range counts, and KV transfer
fields (only motor sets those: a client's would point engines at any address, `input_config.kv_transfer_params`).
"""

import json
import math
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from motor.config.models import InputConfig
from motor.coordinator.encode.score import EncodeWork, encode_work
from motor.coordinator.http import jsonio
from motor.coordinator.http.errors import HttpError, bad_request
from motor.coordinator.scheduling.demand import Demand
from motor.coordinator.scheduling.prefix import CHARS_PER_TOKEN

Api = Literal["chat", "completions"]
API_PATHS: dict[Api, bytes] = {"chat": b"/v1/chat/completions", "completions": b"/v1/completions"}
# Used for load accounting only, when the client does not say how many tokens it wants.
DEFAULT_MAX_NEW_TOKENS = 256
DEFAULT_INPUT = InputConfig()
# Fields of the KV handover (docs/kv_transfer_params.md) that motor alone sets on engine legs.
TRANSFER_FIELDS = ("kv_transfer_params", "bootstrap_host", "bootstrap_port", "bootstrap_room")
# The counts a client may set, each with the input_config field that bounds it.
COUNT_BOUNDS = (
    ("max_tokens", "max_tokens"),
    ("max_completion_tokens", "max_tokens"),
    ("n", "max_n"),
    ("best_of", "max_n"),
)
INT_LIMIT = 1 << 63
# Only a body with a 20-digit run or a 3-digit exponent ([eE][+-]?\d{3}) can hold an integer or float out of
# range; the stricter (slower) decoder is used for those alone. The body is scanned for them as plain
# substrings once every digit reads "0", "E" reads "e" and "-" reads "+" (a regular expression took 20 times
# longer on a 10 kB body).
_NUMBER_SHAPES = bytes.maketrans(b"123456789E-", b"000000000e+")
_TWENTY_DIGITS = b"0" * 20


def might_hold_large_number(raw: bytes) -> bool:
    """Whether `raw` has a run of 20 digits or an exponent of at least 3 digits."""
    shapes = raw.translate(_NUMBER_SHAPES)
    return _TWENTY_DIGITS in shapes or b"e000" in shapes or b"e+000" in shapes


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _bounded_int(text: str) -> int:
    value = int(text)
    if not -INT_LIMIT <= value < INT_LIMIT:
        raise ValueError(f"the integer {text[:20]}... is out of the 64-bit range")
    return value


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {text[:40]} is out of the float range")
    return value


_DECODER = json.JSONDecoder(parse_constant=_no_constant)
_STRICT_DECODER = json.JSONDecoder(
    parse_constant=_no_constant, parse_int=_bounded_int, parse_float=_finite_float
)


@dataclass(slots=True)
class ClientRequest:
    api: Api
    raw: bytes
    body: dict[str, Any]
    model: str
    stream: bool
    demand: Demand
    encode: EncodeWork | None = None  # a chat request's multimodal items: what its encode leg computes
    # the output tokens the client asked for at most (None: it did not say)
    stated_max_tokens: int | None = None

    @property
    def path(self) -> bytes:
        return API_PATHS[self.api]


def parse_request(
    api: Api, raw: bytes, models: frozenset[str] | set[str], limits: InputConfig = DEFAULT_INPUT
) -> ClientRequest:
    body = load_body(raw, limits.max_json_depth)
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    raw = _without_transfer_fields(body, raw, limits)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request("'model' is required and must be a non-empty string", param="model")
    if model not in models:
        known = ", ".join(sorted(models)) or "none registered yet"
        raise HttpError(
            404,
            f"the model {model!r} does not exist; served models: {known}",
            type_="invalid_request_error",
            code="model_not_found",
            param="model",
        )
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise bad_request("'stream' must be true or false", param="stream")
    for name, key in COUNT_BOUNDS:
        value = body.get(name)
        if value is None:
            continue
        most = getattr(limits, key)
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= most:
            raise bad_request(
                f"'{name}' must be an integer from 1 to {most} (motor_coordinator_config.input_config.{key})",
                param=name,
            )
    if (
        "stream_options" in body
        and body["stream_options"] is not None
        and not isinstance(body["stream_options"], dict)
    ):
        raise bad_request("'stream_options' must be an object", param="stream_options")
    items = limits.max_list_items
    text, token_ids = _chat_prompt(body, items) if api == "chat" else _completion_prompt(body, items)
    prompt_tokens = len(token_ids) if token_ids is not None else -(-len(text) // CHARS_PER_TOKEN)
    stated_max = body.get("max_completion_tokens") or body.get("max_tokens")
    max_new = stated_max or DEFAULT_MAX_NEW_TOKENS
    demand = Demand(
        prompt_tokens=prompt_tokens, max_new_tokens=max_new, prompt_text=text, prompt_token_ids=token_ids
    )
    encode = encode_work(body["messages"]) if api == "chat" else None
    return ClientRequest(
        api=api,
        raw=raw,
        body=body,
        model=model,
        stream=stream,
        demand=demand,
        encode=encode,
        stated_max_tokens=stated_max,
    )


def load_body(raw: bytes, max_depth: int) -> Any:
    """The parsed body: strict UTF-8 JSON, numbers in range, at most `max_depth` levels of nesting."""
    large_numbers = might_hold_large_number(raw)
    if not large_numbers:
        try:
            return _bounded_depth(raw, orjson.loads(raw), max_depth)
        except orjson.JSONDecodeError:
            pass  # the standard library's decoder gives the answer: its error, or what orjson refuses to read
    decoder = _STRICT_DECODER if large_numbers else _DECODER
    try:
        body = decoder.decode(raw.decode())
    except UnicodeDecodeError:
        raise bad_request("the request body is not UTF-8", code="invalid_json") from None
    except ValueError as exc:
        raise bad_request(f"the request body is not valid JSON: {exc}", code="invalid_json") from None
    except RecursionError:
        raise _too_deep(max_depth) from None
    return _bounded_depth(raw, body, max_depth)


def _bounded_depth(raw: bytes, body: Any, max_depth: int) -> Any:
    # Each level needs a bracket, so a body with few of them cannot be deep: most bodies skip the walk.
    if raw.count(b"[") + raw.count(b"{") > max_depth and nesting_exceeds(body, max_depth):
        raise _too_deep(max_depth)
    return body


def nesting_exceeds(value: Any, max_depth: int) -> bool:
    """Whether `value` nests lists and dicts more than `max_depth` deep (iterative: no recursion limit)."""
    stack = [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        node, depth = stack.pop()
        if depth > max_depth:
            return True
        for child in node.values() if isinstance(node, dict) else node:
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1))
    return False


def _too_deep(max_depth: int) -> HttpError:
    return bad_request(
        f"the request body nests objects and arrays deeper than {max_depth} levels "
        "(motor_coordinator_config.input_config.max_json_depth)",
        code="too_deeply_nested",
    )


def _without_transfer_fields(body: dict[str, Any], raw: bytes, limits: InputConfig) -> bytes:
    """The raw body to forward: a client's KV transfer fields refused (400) or removed, per the policy."""
    if body.keys().isdisjoint(TRANSFER_FIELDS):
        return raw
    present = [name for name in TRANSFER_FIELDS if name in body]
    if limits.kv_transfer_params == "reject":
        raise bad_request(
            f"'{present[0]}' is set by the coordinator, not by clients; remove it from the request "
            "(motor_coordinator_config.input_config.kv_transfer_params)",
            param=present[0],
            code="unsupported_parameter",
        )
    for name in present:
        del body[name]
    return jsonio.dumps(body)


def _too_many(param: str, most: int) -> HttpError:
    return bad_request(
        f"'{param}' has more than {most} entries (motor_coordinator_config.input_config.max_list_items)",
        param=param,
    )


def _chat_prompt(body: dict[str, Any], max_items: int) -> tuple[str, None]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty list of message objects", param="messages")
    if len(messages) > max_items:
        raise _too_many("messages", max_items)
    pieces = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise bad_request(f"messages[{i}] must be an object with a string 'role'", param=f"messages[{i}]")
        content = message.get("content")
        pieces.append(message["role"])
        if isinstance(content, str):
            pieces.append(content)
        elif isinstance(content, list):
            if len(content) > max_items:
                raise _too_many(f"messages[{i}].content", max_items)
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    pieces.append(part["text"])
        elif content is not None:
            raise bad_request(
                f"messages[{i}].content must be a string, a list of content parts or null",
                param=f"messages[{i}].content",
            )
    return "\n".join(pieces), None


def _completion_prompt(body: dict[str, Any], max_items: int) -> tuple[str, list[int] | None]:
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt, None
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, int) and not isinstance(p, bool) for p in prompt):
            return "", prompt
        if len(prompt) > max_items:
            raise _too_many("prompt", max_items)
        if all(isinstance(p, str) for p in prompt):
            return "\n".join(prompt), None
        if all(
            isinstance(p, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in p)
            for p in prompt
        ):
            return "", [t for p in prompt for t in p]
    raise bad_request(
        "'prompt' must be a string, a list of strings, a list of token ids or a list of token id lists",
        param="prompt",
    )
