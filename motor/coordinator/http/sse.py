"""Server-sent events as OpenAI streams them: `data: <json>\\n\\n` events ending with `data: [DONE]\\n\\n`."""

import json

from motor.coordinator.http.errors import error_object

DONE_EVENT = b"data: [DONE]\n\n"
EVENT_END = b"\n\n"
USAGE_MARK = b'"prompt_tokens"'


def error_events(message: str, type_: str, code: str) -> bytes:
    """An explicit error event followed by [DONE]: how a stream that already started reports a failure."""
    return b"data: " + json.dumps(error_object(message, type_, code=code)).encode() + EVENT_END + DONE_EVENT


def carries_output(event: bytes) -> bool:
    """Whether one event shows the client part of the answer (a token, a finish reason, usage, [DONE]).

    False only for what an engine may send before its first token — the chat role chunk, an empty text or
    content, an SSE comment — so such events can be held back while the attempt is still retryable.
    Unknown shapes count as output.
    """
    if event.startswith(b":"):
        return False
    if not event.startswith(b"data:") or (b'"role"' not in event and b'""' not in event):
        return True
    try:
        chunk = json.loads(event[5:])
    except ValueError:
        return True
    choices = chunk.get("choices") if isinstance(chunk, dict) else None
    if not isinstance(choices, list) or not choices:
        return True
    return any(_choice_carries_output(choice) for choice in choices)


def _choice_carries_output(choice: object) -> bool:
    if not isinstance(choice, dict) or choice.get("finish_reason") is not None:
        return True
    if choice.get("text") or choice.get("token_ids") or choice.get("logprobs"):
        return True
    delta = choice.get("delta", {})
    if not isinstance(delta, dict):
        return True
    return any(value for key, value in delta.items() if key != "role")


class SseSplitter:
    """Cuts an upstream byte stream at event boundaries so only whole events are relayed."""

    __slots__ = ("_rest", "done", "events")

    def __init__(self) -> None:
        self._rest = b""
        self.done = False
        self.events = 0

    def feed(self, data: bytes) -> bytes:
        buffer = self._rest + data if self._rest else data
        end = buffer.rfind(EVENT_END)
        if end < 0:
            self._rest = buffer
            return b""
        end += 2
        self._rest = buffer[end:]
        complete = buffer[:end]
        self.events += complete.count(b"data:")
        if complete.endswith(DONE_EVENT):
            self.done = True
        return complete


def set_cached_tokens(response: dict, cached_tokens: int) -> None:
    """Report the prefill's cached prompt tokens as the request's: the decode leg received all of them."""
    usage = response.get("usage")
    if isinstance(usage, dict):
        details = usage.get("prompt_tokens_details")
        details = dict(details) if isinstance(details, dict) else {}
        details["cached_tokens"] = cached_tokens
        usage["prompt_tokens_details"] = details


def rewrite_usage_events(events: bytes, cached_tokens: int) -> bytes:
    if USAGE_MARK not in events:
        return events
    parts = events.split(EVENT_END)
    for i, event in enumerate(parts):
        if USAGE_MARK in event and event.startswith(b"data: {"):
            try:
                chunk = json.loads(event[6:])
            except ValueError:
                continue
            set_cached_tokens(chunk, cached_tokens)
            parts[i] = b"data: " + json.dumps(chunk).encode()
    return EVENT_END.join(parts)
