"""What a vLLM 0.32 engine hands its chat template for a chat completions body, so that the coordinator renders the
same prompt (`HfPromptTokenizer`). vLLM's preprocessing, as it behaves for text-only requests:

- messages: each keeps its role and content; an assistant message also its `tool_calls` (each call's `arguments`
  JSON string parsed into an object; `{}` when empty, not JSON or not an object; an empty list dropped) and its
  `reasoning` (also as `reasoning_content`); a tool message its `tool_call_id`; any message its `name` and `task`
  when they are strings; a developer message its `tools`. Nothing else of a message reaches the template.
- content: text parts (`text`, and a `refusal` part's text); a system message's leading
  Claude Code billing header line dropped. A template that loops over a message's content gets the parts as
  `{"type": "text", "text": ...}` (a tool message's joined by newlines), any other the texts joined by newlines,
  empty ones left out.
- a template that never names the developer role gets developer messages as system messages, every system
  message merged into one at the start (their texts joined by blank lines).
- tools: each as vLLM's tool model writes it out: `{"type": "function", "function": {"name", "description",
  "parameters", ["strict"], ["defer_loading"]}, ["defer_loading"]}` (the bracketed keys only when set).
- template arguments: `chat_template_kwargs`, overridden by the body's `add_generation_prompt` (default true),
  `continue_final_message` (default false), and `documents` and `reasoning_effort` when given; a
  `reasoning_effort` also sets `enable_thinking` (false for "none") unless the kwargs do.
Anything else (images, audio, unknown part types, malformed tools or tool calls) gives None: the coordinator
then places the request by load.
"""

import json
from functools import lru_cache
from typing import Any

TEXT_PARTS = {"text": "text", "refusal": "refusal"}  # part type -> the key holding its text
BILLING_HEADER = "x-anthropic-billing-header"
TEMPLATE_ARGUMENTS = ("documents", "reasoning_effort")


class Unreproducible(ValueError):
    """A body whose prompt the coordinator cannot render as vLLM does."""


def chat_conversation(messages: Any, template: str) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise Unreproducible("no messages")
    parts_as_dicts = loops_over_content(template)
    result = [_message(message, parts_as_dicts) for message in messages]
    if any(m["role"] == "developer" for m in result) and not names_developer(template):
        result = _developer_as_system(result)
    return result


def chat_tools(value: Any) -> list[dict[str, Any]] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise Unreproducible("tools is not a list")
    return [_tool(tool) for tool in value]


def template_arguments(body: dict[str, Any]) -> dict[str, Any]:
    kwargs = body.get("chat_template_kwargs") or {}
    if not isinstance(kwargs, dict) or "tokenize" in kwargs or "chat_template" in kwargs:
        raise Unreproducible("chat_template_kwargs vLLM refuses")
    given = {
        "add_generation_prompt": body.get("add_generation_prompt", True),
        "continue_final_message": body.get("continue_final_message", False),
        **{name: body.get(name) for name in TEMPLATE_ARGUMENTS},
    }
    effort = body.get("reasoning_effort")
    if effort is not None and "enable_thinking" not in kwargs:
        given["enable_thinking"] = effort != "none"
    return {**kwargs, **{k: v for k, v in given.items() if v is not None and v != "auto"}}


def _message(message: Any, parts_as_dicts: bool) -> dict[str, Any]:
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise Unreproducible("a message without a role")
    role = message["role"]
    texts = _texts(message.get("content"))
    if role == "system":
        texts = _without_billing_header(texts)
    if not parts_as_dicts:
        content: Any = "\n".join(text for text in texts if text)
    elif role == "tool":
        content = "\n".join(texts)
    else:
        content = [{"type": "text", "text": text} for text in texts]
    result: dict[str, Any] = {"role": role, "content": content}
    if role == "assistant":
        calls = message.get("tool_calls")
        if calls is not None and (parsed := _tool_calls(calls)):
            result["tool_calls"] = parsed
        if message.get("reasoning") is not None:
            result["reasoning"] = result["reasoning_content"] = message["reasoning"]
    elif role == "tool" and "tool_call_id" in message:
        result["tool_call_id"] = message["tool_call_id"]
    for key in ("name", "task"):
        if isinstance(message.get(key), str):
            result[key] = message[key]
    if role == "developer":
        result["tools"] = message.get("tools")
    return result


def _texts(content: Any) -> list[str]:
    if content is None:
        return []
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        raise Unreproducible("content is neither text nor parts")
    texts = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
            continue
        field = TEXT_PARTS.get(part.get("type")) if isinstance(part, dict) else None
        if field is None:
            raise Unreproducible("a content part that is not text")
        if isinstance(part.get(field), str):
            texts.append(part[field])
    return texts


def _without_billing_header(texts: list[str]) -> list[str]:
    kept = []
    for text in texts:
        if text.startswith(BILLING_HEADER):
            text = text.partition("\n")[2]
            if not text:
                continue
        kept.append(text)
    return kept


def _tool_calls(calls: Any) -> list[dict[str, Any]]:
    if not isinstance(calls, list):
        raise Unreproducible("tool_calls is not a list")
    parsed = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or call.get("type", "function") != "function":
            raise Unreproducible("a tool call that is not a function call")
        parsed.append({**call, "function": {**function, "arguments": _arguments(function.get("arguments"))}})
    return parsed


def _arguments(arguments: Any) -> dict[str, Any]:
    if not arguments:
        return {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return {}
    return arguments if isinstance(arguments, dict) else {}


def _tool(tool: Any) -> dict[str, Any]:
    function = tool.get("function") if isinstance(tool, dict) else None
    if (
        not isinstance(function, dict)
        or not isinstance(function.get("name"), str)
        or tool.get("type", "function") != "function"
    ):
        raise Unreproducible("a tool that is not a named function")
    defer = tool.get("defer_loading")
    written: dict[str, Any] = {
        "name": function["name"],
        "description": function.get("description"),
        "parameters": function.get("parameters"),
    }
    for key, value in (("strict", function.get("strict")), ("defer_loading", function.get("defer_loading"))):
        if key == "defer_loading" and value is None:
            value = defer
        if value is not None:
            written[key] = value
    result: dict[str, Any] = {"type": "function", "function": written}
    if defer is not None:
        result["defer_loading"] = defer
    return result


def _developer_as_system(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    converted = [
        {k: v for k, v in {**m, "role": "system"}.items() if k != "tools"} if m["role"] == "developer" else m
        for m in messages
    ]
    systems = [i for i, m in enumerate(converted) if m["role"] == "system"]
    if not systems or systems == [0]:
        return converted
    texts = []
    for i in systems:
        content = converted[i]["content"]
        text = content if isinstance(content, str) else "\n".join(part["text"] for part in content)
        if text:
            texts.append(text)
    merged = {"role": "system", "content": "\n\n".join(texts)}
    return [merged, *(m for m in converted if m["role"] != "system")]


@lru_cache(maxsize=32)
def names_developer(template: str) -> bool:
    return '"developer"' in template or "'developer'" in template


@lru_cache(maxsize=32)
def loops_over_content(template: str) -> bool:
    """Whether the template iterates over a message's content (`for part in message['content']`,
    `for part in content`): vLLM then passes content as a list of parts."""
    import jinja2
    import jinja2.ext
    import jinja2.nodes
    import jinja2.sandbox

    environment = jinja2.sandbox.ImmutableSandboxedEnvironment(extensions=[jinja2.ext.loopcontrols])
    try:
        tree = environment.parse(template)
    except jinja2.TemplateError:
        return False
    return any(_names_content(loop.iter) for loop in tree.find_all(jinja2.nodes.For))


def _names_content(node: Any) -> bool:
    import jinja2.nodes

    while isinstance(node, jinja2.nodes.Filter | jinja2.nodes.Test) or (
        isinstance(node, jinja2.nodes.Getitem) and isinstance(node.arg, jinja2.nodes.Slice)
    ):
        node = node.node
    if isinstance(node, jinja2.nodes.Name):
        return node.name == "content"
    if isinstance(node, jinja2.nodes.Getattr):
        return node.attr == "content"
    if isinstance(node, jinja2.nodes.Getitem):
        return isinstance(node.arg, jinja2.nodes.Const) and node.arg.value == "content"
    return False
