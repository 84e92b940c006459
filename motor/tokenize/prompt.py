"""Prompt tokenizers per engine type (see the package docstring)."""

import json
from pathlib import Path
from typing import Any, Literal, Protocol

from motor.tokenize.sim_vocab import VOCAB_SIZE, encode, render_chat
from motor.tokenize.vllm_chat import chat_conversation, chat_tools, template_arguments

Api = Literal["chat", "completions"]
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")
CHAT_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")


class TokenizerUnavailable(ValueError):
    pass


class PromptTokenizer(Protocol):
    def prompt_ids(self, body: dict[str, Any], api: Api) -> list[int] | None: ...


def _single_prompt(body: dict[str, Any]) -> Any:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        return prompt[0]
    return prompt


def _ids(prompt: Any, vocab_size: int | None) -> list[int] | None:
    if not isinstance(prompt, list) or not prompt:
        return None
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return None
    if vocab_size is not None and any(not 0 <= t < vocab_size for t in prompt):
        return None
    return list(prompt)


def _text_content(content: Any) -> str | None:
    """A message's content as text: a string, None (empty) or text parts joined by newlines; else None."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not (
                isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
            ):
                return None
            texts.append(part["text"])
        return "\n".join(texts)
    return None


def _text_messages(body: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The chat messages with their content as text; None when any message is not a role with text content."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return None
    result = []
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            return None
        text = _text_content(message.get("content"))
        if text is None:
            return None
        result.append({**message, "content": text})
    return result


class SimPromptTokenizer:
    def prompt_ids(self, body: dict[str, Any], api: Api) -> list[int] | None:
        if api == "completions":
            prompt = _single_prompt(body)
            return (encode(prompt) or None) if isinstance(prompt, str) else _ids(prompt, VOCAB_SIZE)
        messages = _text_messages(body)
        if messages is None:
            return None
        pairs = [(message["role"], message["content"]) for message in messages]
        add = body.get("add_generation_prompt", True) is not False
        return encode(render_chat(pairs, add_generation_prompt=add))


class HfPromptTokenizer:
    """A model directory's tokenizer and chat template. Hugging Face fast tokenizers are thread-safe to call."""

    def __init__(self, model_dir: str) -> None:
        problem = tokenizer_problem("vllm", model_dir)
        if problem is not None:
            raise TokenizerUnavailable(problem)
        from transformers import AutoTokenizer  # loaded only by coordinators that tokenize

        self.tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)

    def prompt_ids(self, body: dict[str, Any], api: Api) -> list[int] | None:
        if api == "completions":
            prompt = _single_prompt(body)
            if isinstance(prompt, str):
                return self.tokenizer.encode(prompt, add_special_tokens=True) or None
            return _ids(prompt, None)
        try:
            tools = chat_tools(body.get("tools"))
            template = self.tokenizer.get_chat_template(None, tools)
            text = self.tokenizer.apply_chat_template(
                chat_conversation(body.get("messages"), template),
                tools=tools,
                chat_template=template,
                tokenize=False,
                **template_arguments(body),
            )
        except Exception:  # a body vLLM would render otherwise, or a template that refuses it: placed by load
            return None
        return self.tokenizer.encode(text, add_special_tokens=False)


def tokenizer_problem(engine_type: str, model_path: str | None) -> str | None:
    """Why the coordinator could not tokenize for this engine (None: it can); reads no file, only looks."""
    if engine_type == "sim":
        return None
    if engine_type != "vllm":
        return f"motor cannot tokenize prompts for engine type {engine_type!r} (kv_cache_affinity needs vllm or sim)"
    if not model_path:
        return "the engine's model path is not set: set engine_config.model to the model directory"
    directory = Path(model_path)
    if not directory.is_dir():
        return f"{model_path}: not a directory the coordinator can read (the coordinator loads its tokenizer)"
    if not any((directory / name).is_file() for name in TOKENIZER_FILES):
        return f"{model_path}: no tokenizer file ({', '.join(TOKENIZER_FILES)})"
    return None


def has_chat_template(model_path: str) -> bool:
    """Whether a model directory carries a chat template (its own file, or in tokenizer_config.json)."""
    directory = Path(model_path)
    if any((directory / name).is_file() for name in CHAT_TEMPLATE_FILES):
        return True
    try:
        config = json.loads((directory / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and bool(config.get("chat_template"))


def load_prompt_tokenizer(engine_type: str, model_path: str | None) -> PromptTokenizer:
    if engine_type == "sim":
        return SimPromptTokenizer()
    problem = tokenizer_problem(engine_type, model_path)
    if problem is not None:
        raise TokenizerUnavailable(problem)
    assert model_path is not None
    return HfPromptTokenizer(model_path)
