"""The Anthropic Messages API in OpenAI chat terms, both ways, pure: a `/v1/messages` body becomes a chat
completions body (`to_chat`), a chat completion becomes a message (`message_from_chat`), a chat stream becomes
Anthropic's events (`MessageStream`), an OpenAI error body becomes Anthropic's error shape (`error_from_openai`).

Carried: text, images (base64 or URL), and custom tools — `tools` as chat functions, `tool_choice` (auto, any →
required, tool → the named function, none; `disable_parallel_tool_use` → `parallel_tool_calls: false`), an
assistant turn's `tool_use` blocks as its `tool_calls` (input → JSON arguments), a user turn's `tool_result` blocks
as `tool` messages ahead of the rest of the turn, and the answer's tool calls back as `tool_use` blocks (streamed as
`input_json_delta`s). What has no chat equivalent is refused with a 400 naming the field: Anthropic's own server
tools, thinking, documents, images inside a tool result. A tool result's `is_error` has none either: accepted,
not carried (as vLLM's own /v1/messages does).
"""

import json
from typing import Any

from motor.coordinator.http.errors import bad_request

KNOWN_FIELDS = frozenset(
    {
        "model",
        "max_tokens",
        "messages",
        "system",
        "stop_sequences",
        "stream",
        "temperature",
        "top_p",
        "top_k",
        "metadata",
        "service_tier",
        "tools",
        "tool_choice",
    }
)
REFUSED_FIELDS = {"thinking": "extended thinking is not carried on /v1/messages"}
TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


# ---- request ------------------------------------------------------------------------------------------------


def to_chat(body: object) -> dict[str, Any]:
    """The chat completions body of a Messages request; HttpError 400 for what cannot be carried."""
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    for name, why in REFUSED_FIELDS.items():
        if name in body:
            raise bad_request(why, param=name, code="unsupported_field")
    unknown = sorted(set(body) - KNOWN_FIELDS)
    if unknown:
        raise bad_request(f"unknown field {unknown[0]!r} for /v1/messages", param=unknown[0])
    max_tokens = body.get("max_tokens")
    if max_tokens is None:
        raise bad_request("'max_tokens' is required on /v1/messages", param="max_tokens")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty list", param="messages")
    chat_messages = [*_system(body.get("system"))]
    for index, message in enumerate(messages):
        chat_messages += _messages(message, index)
    chat: dict[str, Any] = {"model": body.get("model"), "max_tokens": max_tokens, "messages": chat_messages}
    if "tools" in body:
        chat["tools"] = _tools(body["tools"])
    if "tool_choice" in body:
        _tool_choice(body["tool_choice"], chat)
    for name in ("temperature", "top_p", "top_k"):
        if name in body:
            chat[name] = body[name]
    stops = body.get("stop_sequences")
    if stops is not None:
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise bad_request("'stop_sequences' must be a list of strings", param="stop_sequences")
        chat["stop"] = stops
    stream = body.get("stream", False)
    chat["stream"] = stream
    if stream is True:
        # the usage chunk gives the output tokens; the prompt's token ids in the first chunk give message_start
        # its input_tokens before the answer is known
        chat["stream_options"] = {"include_usage": True}
        chat["return_token_ids"] = True
    return chat


def _system(system: object) -> list[dict[str, Any]]:
    if system is None:
        return []
    if isinstance(system, str):
        return [{"role": "system", "content": system}]
    if isinstance(system, list):
        texts = [_text_block(block, f"system[{i}]") for i, block in enumerate(system)]
        return [{"role": "system", "content": "\n".join(texts)}]
    raise bad_request("'system' must be a string or a list of text blocks", param="system")


def _messages(message: object, index: int) -> list[dict[str, Any]]:
    """The chat messages of one turn: a user turn's tool results become `tool` messages ahead of the rest."""
    where = f"messages[{index}]"
    if not isinstance(message, dict):
        raise bad_request(f"'{where}' must be an object", param=where)
    role = message.get("role")
    if role not in ("user", "assistant"):
        raise bad_request(f"'{where}.role' must be 'user' or 'assistant'", param=f"{where}.role")
    content = message.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise bad_request(f"'{where}.content' must be a string or a list of blocks", param=f"{where}.content")
    blocks = [(block, f"{where}.content[{i}]") for i, block in enumerate(content)]
    if role == "assistant":
        return [_assistant_turn(blocks, where)]
    results = [_tool_result(block, at) for block, at in blocks if _kind(block) == "tool_result"]
    parts = [_part(block, at) for block, at in blocks if _kind(block) != "tool_result"]
    if not parts:
        return results
    if all(part["type"] == "text" for part in parts):
        return [*results, {"role": "user", "content": "".join(part["text"] for part in parts)}]
    return [*results, {"role": "user", "content": parts}]


def _kind(block: object) -> object:
    return block.get("type") if isinstance(block, dict) else None


def _assistant_turn(blocks: list[tuple[object, str]], where: str) -> dict[str, Any]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block, at in blocks:
        if _kind(block) == "tool_use":
            calls.append(_tool_call(block, at))
        elif _kind(block) == "text":
            texts.append(_text_block(block, at))
        else:
            raise bad_request(f"'{at}': an assistant turn carries text and tool_use blocks", param=at)
    turn: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts or not calls else None}
    if calls:
        turn["tool_calls"] = calls
    return turn


def _tool_call(block: object, where: str) -> dict[str, Any]:
    assert isinstance(block, dict)
    call_id, name, arguments = block.get("id"), block.get("name"), block.get("input", {})
    if not isinstance(call_id, str) or not isinstance(name, str) or not isinstance(arguments, dict):
        raise bad_request(
            f"'{where}': a tool_use block needs a string id and name and an object input", param=where
        )
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def _tool_result(block: object, where: str) -> dict[str, Any]:
    assert isinstance(block, dict)
    call_id, content = block.get("tool_use_id"), block.get("content", "")
    if not isinstance(call_id, str):
        raise bad_request(f"'{where}.tool_use_id' must be a string", param=f"{where}.tool_use_id")
    if isinstance(content, list):
        content = "".join(_tool_result_text(part, f"{where}.content[{i}]") for i, part in enumerate(content))
    elif not isinstance(content, str):
        raise bad_request(
            f"'{where}.content' must be a string or a list of text blocks", param=f"{where}.content"
        )
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def _tool_result_text(block: object, where: str) -> str:
    if _kind(block) != "text":
        raise bad_request(
            f"'{where}': a tool result carries text blocks only (images in tool results are not carried)",
            param=where,
            code="unsupported_field",
        )
    return _text_block(block, where)


def _tools(tools: object) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        raise bad_request("'tools' must be a list", param="tools")
    return [_tool(tool, f"tools[{i}]") for i, tool in enumerate(tools)]


def _tool(tool: object, where: str) -> dict[str, Any]:
    if not isinstance(tool, dict):
        raise bad_request(f"'{where}' must be an object", param=where)
    if tool.get("type", "custom") != "custom":
        raise bad_request(
            f"'{where}': {tool.get('type')!r} is one of Anthropic's server tools, which only Anthropic runs; "
            "motor carries custom tools (name, description, input_schema)",
            param=where,
            code="unsupported_field",
        )
    name, schema, description = tool.get("name"), tool.get("input_schema"), tool.get("description")
    if not isinstance(name, str) or not isinstance(schema, dict):
        raise bad_request(f"'{where}' needs a string name and an object input_schema", param=where)
    function: dict[str, Any] = {"name": name, "parameters": schema}
    if isinstance(description, str):
        function["description"] = description
    return {"type": "function", "function": function}


def _tool_choice(choice: object, chat: dict[str, Any]) -> None:
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "tool" and isinstance(choice, dict) and isinstance(choice.get("name"), str):
        chat["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    elif kind in TOOL_CHOICES:
        chat["tool_choice"] = TOOL_CHOICES[kind]  # type: ignore[index]
    else:
        raise bad_request(
            "'tool_choice' must be {'type': 'auto' | 'any' | 'none'} or {'type': 'tool', 'name': ...}",
            param="tool_choice",
        )
    assert isinstance(choice, dict)
    if choice.get("disable_parallel_tool_use") is True:
        chat["parallel_tool_calls"] = False


def _part(block: object, where: str) -> dict[str, Any]:
    kind = _kind(block)
    if kind == "text":
        return {"type": "text", "text": _text_block(block, where)}
    if kind == "image":
        assert isinstance(block, dict)
        return {"type": "image_url", "image_url": {"url": _image_url(block.get("source"), f"{where}.source")}}
    if kind == "tool_use":
        raise bad_request(f"'{where}': tool_use blocks belong to assistant turns", param=where)
    raise bad_request(f"'{where}': blocks of type {kind!r} are not carried (text and image are)", param=where)


def _text_block(block: object, where: str) -> str:
    if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
        raise bad_request(f"'{where}' must be a text block {{'type': 'text', 'text': ...}}", param=where)
    return block["text"]


def _image_url(source: object, where: str) -> str:
    if isinstance(source, dict):
        if source.get("type") == "base64":
            media, data = source.get("media_type"), source.get("data")
            if isinstance(media, str) and isinstance(data, str):
                return f"data:{media};base64,{data}"
        elif source.get("type") == "url" and isinstance(source.get("url"), str):
            return source["url"]
    raise bad_request(f"'{where}' must be a base64 (media_type, data) or url image source", param=where)


# ---- response -----------------------------------------------------------------------------------------------


def message_id(chat_id: object) -> str:
    text = chat_id if isinstance(chat_id, str) else ""
    return "msg_" + (text.removeprefix("chatcmpl-") or "motor")


def stop_of(choice: dict[str, Any]) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence) of a chat choice: vLLM's `stop_reason` names the stop string matched."""
    finish = choice.get("finish_reason")
    matched = choice.get("stop_reason")
    if finish == "stop" and isinstance(matched, str):
        return "stop_sequence", matched
    return STOP_REASONS.get(finish, "end_turn"), None  # type: ignore[arg-type]


def message_from_chat(chat: dict[str, Any]) -> dict[str, Any]:
    choices = chat.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    message = choice.get("message") or {}
    text = message.get("content") or ""
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    stop_reason, stop_sequence = stop_of(choice)
    cut = stop_reason == "max_tokens"
    content += [_tool_use(call, cut) for call in message.get("tool_calls") or ()]
    if len(content) > bool(text) and stop_reason == "end_turn":  # vLLM ends a forced tool call with "stop"
        stop_reason = "tool_use"
    usage = chat.get("usage") or {}
    return {
        "id": message_id(chat.get("id")),
        "type": "message",
        "role": "assistant",
        "model": chat.get("model"),
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": {
            "input_tokens": usage.get("prompt_tokens", 0),
            "output_tokens": usage.get("completion_tokens", 0),
        },
    }


def _tool_use(call: dict[str, Any], cut: bool) -> dict[str, Any]:
    """A chat tool call as a tool_use block. Arguments that are not a JSON object are the engine's fault (a
    ValueError: the answer becomes a 502) unless max_tokens `cut` them short: then the input is empty, and the
    stop reason `max_tokens` says why."""
    function = call["function"]
    try:
        arguments = json.loads(function.get("arguments") or "{}")
    except ValueError:
        if not cut:
            raise
        arguments = {}
    if not isinstance(arguments, dict):
        raise ValueError("the engine's tool call arguments are not a JSON object")
    return {
        "type": "tool_use",
        "id": call.get("id") or "toolu_motor",
        "name": function["name"],
        "input": arguments,
    }


def error_type(status: int) -> str:
    return ERROR_TYPES.get(status, "api_error")


def error_object(status: int, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type(status), "message": message}}


def error_from_openai(status: int, body: bytes) -> bytes:
    """An OpenAI-style (or vLLM-style `{"message": ...}`) error body in Anthropic's shape."""
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    message = body.decode(errors="replace")[:500] or f"HTTP {status}"
    if isinstance(parsed, dict):
        inner = parsed.get("error")
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            message = inner["message"]
        elif isinstance(parsed.get("message"), str):
            message = parsed["message"]
    return json.dumps(error_object(status, message)).encode()


def event(kind: str, payload: dict[str, Any]) -> bytes:
    return b"event: %b\ndata: %b\n\n" % (kind.encode(), json.dumps(payload).encode())


class MessageStream:
    """Turns a chat completions stream (whole SSE events, as the relay sends them) into Anthropic's events. A
    content block opens with its first delta: text, or a tool call (whose argument fragments become
    `input_json_delta`s); the one open is closed when the next begins and at the end."""

    def __init__(self) -> None:
        self.started = False
        self.ended = False
        self._stop: tuple[str, str | None] = ("end_turn", None)
        self._usage: dict[str, Any] = {}
        self._blocks = 0  # content blocks opened so far; the open one, if any, is the last
        self._open: tuple[str, int] | None = None  # ("text", 0) or ("tool", the chat tool call's index)
        self._tool_used = False

    def feed(self, events: bytes) -> bytes:
        out: list[bytes] = []
        for raw in events.split(b"\n\n"):
            if not raw.startswith(b"data: ") or self.ended:
                continue
            data = raw[6:]
            if data == b"[DONE]":
                out.append(self._finish())
                continue
            try:
                chunk = json.loads(data)
            except ValueError:
                continue
            if isinstance(chunk, dict):
                out.append(self._chunk(chunk))
        return b"".join(out)

    def _chunk(self, chunk: dict[str, Any]) -> bytes:
        error = chunk.get("error")
        if isinstance(error, dict):
            self.ended = True
            return self._close() + event(
                "error", error_object(502, str(error.get("message", "the stream failed")))
            )
        out = b"" if self.started else self._start(chunk)
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta") or {}
            text = delta.get("content")
            if text:
                out += self._text(text)
            for call in delta.get("tool_calls") or ():
                if isinstance(call, dict):
                    out += self._tool_call(call)
            if choice.get("finish_reason") is not None:
                self._stop = stop_of(choice)
        return out

    def _text(self, text: str) -> bytes:
        out = b""
        if self._open != ("text", 0):
            out = self._close() + self._begin({"type": "text", "text": ""}, ("text", 0))
        return out + self._delta({"type": "text_delta", "text": text})

    def _tool_call(self, call: dict[str, Any]) -> bytes:
        index = call.get("index", 0)
        function = call.get("function") or {}
        out = b""
        if self._open != ("tool", index):
            self._tool_used = True
            block = {"type": "tool_use", "id": call.get("id") or f"toolu_motor_{index}", "input": {}}
            block["name"] = function.get("name") or ""
            out = self._close() + self._begin(block, ("tool", index))
        arguments = function.get("arguments")
        if arguments:
            out += self._delta({"type": "input_json_delta", "partial_json": arguments})
        return out

    def _begin(self, block: dict[str, Any], kind: tuple[str, int]) -> bytes:
        self._open = kind
        self._blocks += 1
        start = {"type": "content_block_start", "index": self._blocks - 1, "content_block": block}
        return event("content_block_start", start)

    def _delta(self, delta: dict[str, Any]) -> bytes:
        payload = {"type": "content_block_delta", "index": self._blocks - 1, "delta": delta}
        return event("content_block_delta", payload)

    def _close(self) -> bytes:
        if self._open is None:
            return b""
        self._open = None
        return event("content_block_stop", {"type": "content_block_stop", "index": self._blocks - 1})

    def _start(self, chunk: dict[str, Any]) -> bytes:
        self.started = True
        prompt_ids = chunk.get("prompt_token_ids")
        choices = chunk.get("choices") or [{}]
        if prompt_ids is None and isinstance(choices[0], dict):
            prompt_ids = choices[0].get("prompt_token_ids")
        usage = chunk.get("usage") if isinstance(chunk.get("usage"), dict) else {}
        input_tokens = len(prompt_ids) if isinstance(prompt_ids, list) else usage.get("prompt_tokens", 0)
        message = {
            "id": message_id(chunk.get("id")),
            "type": "message",
            "role": "assistant",
            "model": chunk.get("model"),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": 0},
        }
        return event("message_start", {"type": "message_start", "message": message}) + event(
            "ping", {"type": "ping"}
        )

    def _finish(self) -> bytes:
        self.ended = True
        stop_reason, stop_sequence = self._stop
        if self._tool_used and stop_reason == "end_turn":  # vLLM ends a forced tool call with "stop"
            stop_reason = "tool_use"
        usage: dict[str, Any] = {"output_tokens": self._usage.get("completion_tokens", 0)}
        if "prompt_tokens" in self._usage:
            usage["input_tokens"] = self._usage["prompt_tokens"]
        out = b"" if self.started else self._start({})
        return (
            out
            + self._close()
            + event(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                    "usage": usage,
                },
            )
            + event("message_stop", {"type": "message_stop"})
        )


class AnthropicSend:
    """The ASGI `send` of a /v1/messages request: what the chat path sends, in Anthropic's shapes. A stream's
    events are translated as they pass; a JSON answer (the message, or an error) is held until whole, since its
    length changes."""

    __slots__ = ("_head", "_parts", "_send", "_stream")

    def __init__(self, send: Any) -> None:
        self._send = send
        self._stream: MessageStream | None = None
        self._head: dict[str, Any] | None = None
        self._parts: list[bytes] = []

    async def __call__(self, message: Any) -> None:
        if message["type"] == "http.response.start":
            content_type = next((v for k, v in message["headers"] if k == b"content-type"), b"")
            if message["status"] == 200 and content_type.startswith(b"text/event-stream"):
                self._stream = MessageStream()
                await self._send(message)
            else:
                self._head = message
            return
        body = message.get("body", b"")
        more = message.get("more_body", False)
        if self._stream is not None:
            translated = self._stream.feed(body)
            if translated or not more:
                await self._send({"type": "http.response.body", "body": translated, "more_body": more})
            return
        self._parts.append(body)
        if more:
            return
        assert self._head is not None
        status = self._head["status"]
        raw = b"".join(self._parts)
        translated = raw
        if status != 200:
            translated = error_from_openai(status, raw)
        else:
            try:
                translated = json.dumps(message_from_chat(json.loads(raw))).encode()
            except (ValueError, AttributeError, TypeError):
                status, translated = (
                    502,
                    error_from_openai(502, b"the engine's answer is not a chat completion"),
                )
        headers = [(k, v) for k, v in self._head["headers"] if k not in (b"content-length", b"content-type")]
        headers += [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(translated))]
        await self._send({"type": "http.response.start", "status": status, "headers": headers})
        await self._send({"type": "http.response.body", "body": translated})
