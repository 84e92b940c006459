"""Client request parsing and validation (→ 400 with an OpenAI error body) and its cost estimate."""

import json
from dataclasses import dataclass
from typing import Any, Literal

from motor.coordinator.errors import HttpError, bad_request
from motor.coordinator.scheduling.demand import Demand
from motor.coordinator.scheduling.prefix import CHARS_PER_TOKEN

Api = Literal["chat", "completions"]
API_PATHS: dict[Api, bytes] = {"chat": b"/v1/chat/completions", "completions": b"/v1/completions"}
# Used for load accounting only, when the client does not say how many tokens it wants.
DEFAULT_MAX_NEW_TOKENS = 256


@dataclass(slots=True)
class ClientRequest:
    api: Api
    raw: bytes
    body: dict[str, Any]
    model: str
    stream: bool
    demand: Demand

    @property
    def path(self) -> bytes:
        return API_PATHS[self.api]


def parse_request(api: Api, raw: bytes, models: frozenset[str] | set[str]) -> ClientRequest:
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad_request(f"the request body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
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
    for name in ("max_tokens", "max_completion_tokens", "n"):
        value = body.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise bad_request(f"'{name}' must be a positive integer", param=name)
    if (
        "stream_options" in body
        and body["stream_options"] is not None
        and not isinstance(body["stream_options"], dict)
    ):
        raise bad_request("'stream_options' must be an object", param="stream_options")
    text, token_ids = _chat_prompt(body) if api == "chat" else _completion_prompt(body)
    prompt_tokens = len(token_ids) if token_ids is not None else -(-len(text) // CHARS_PER_TOKEN)
    max_new = body.get("max_completion_tokens") or body.get("max_tokens") or DEFAULT_MAX_NEW_TOKENS
    demand = Demand(
        prompt_tokens=prompt_tokens, max_new_tokens=max_new, prompt_text=text, prompt_token_ids=token_ids
    )
    return ClientRequest(api=api, raw=raw, body=body, model=model, stream=stream, demand=demand)


def _chat_prompt(body: dict[str, Any]) -> tuple[str, None]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty list of message objects", param="messages")
    pieces = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise bad_request(f"messages[{i}] must be an object with a string 'role'", param=f"messages[{i}]")
        content = message.get("content")
        pieces.append(message["role"])
        if isinstance(content, str):
            pieces.append(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    pieces.append(part["text"])
        elif content is not None:
            raise bad_request(
                f"messages[{i}].content must be a string, a list of content parts or null",
                param=f"messages[{i}].content",
            )
    return "\n".join(pieces), None


def _completion_prompt(body: dict[str, Any]) -> tuple[str, list[int] | None]:
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt, None
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt):
            return "\n".join(prompt), None
        if all(isinstance(p, int) and not isinstance(p, bool) for p in prompt):
            return "", prompt
        if all(isinstance(p, list) and all(isinstance(t, int) for t in p) for p in prompt):
            return "", [t for p in prompt for t in p]
    raise bad_request(
        "'prompt' must be a string, a list of strings, a list of token ids or a list of token id lists",
        param="prompt",
    )
