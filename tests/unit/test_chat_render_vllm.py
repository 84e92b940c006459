"""Chat requests rendered by the coordinator's tokenizer (motor.tokenize) give the very token ids the installed vLLM
renders for them: vLLM's own chat preprocessing (`OnlineRenderer.render_chat`, what its chat completions server and
its render server run) is called in-process on `motor model tiny`'s directory, under three chat templates — the
tiny model's ChatML one, one that renders tools, tool calls, names and a template argument, and one that loops over
a message's content parts and names the developer role."""

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest

from motor.tokenize import HfPromptTokenizer
from tests.installs import importable, needs_vllm

pytestmark = needs_vllm

TOOLS_TEMPLATE = """\
{%- if tools %}<|im_start|>system
Tools:
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}<|im_end|>
{% endif %}
{%- for message in messages %}<|im_start|>{{ message['role'] }}
{%- if message['content'] %}
{{ message['content'] }}
{%- endif %}
{%- if message['reasoning_content'] %}
<think>{{ message['reasoning_content'] }}</think>
{%- endif %}
{%- for call in message['tool_calls'] or [] %}
<call id="{{ call['id'] }}" name="{{ call['function']['name'] }}">{{ call['function']['arguments'] | tojson }}</call>
{%- endfor %}
{%- if message['role'] == 'tool' %} (answers {{ message['tool_call_id'] }}){% endif %}
{%- if message['name'] %} [{{ message['name'] }}]{% endif %}<|im_end|>
{% endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{%- if enable_thinking is defined and not enable_thinking %}
<think></think>{% endif %}
{% endif %}"""

PARTS_TEMPLATE = """\
{%- for message in messages %}<|im_start|>{{ message.role }}{% if message.role == "developer" %}!{% endif %}
{% if message.content is string %}{{ message.content }}{% else %}
{%- for part in message.content %}[{{ part.type }}:{{ part.text }}]{% endfor %}{% endif %}<|im_end|>
{% endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

WEATHER = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "the weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CALL = {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}
TURNS = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "hello there"},
    {"role": "assistant", "content": "hi"},
    {"role": "user", "content": "again, please"},
]
BODIES: dict[str, dict[str, Any]] = {
    "turns": {"messages": TURNS},
    "no generation prompt": {"messages": TURNS, "add_generation_prompt": False},
    "continued final message": {
        "messages": [*TURNS, {"role": "assistant", "content": "Once upon a"}],
        "add_generation_prompt": False,
        "continue_final_message": True,
    },
    "template kwargs": {"messages": TURNS, "chat_template_kwargs": {"enable_thinking": False, "unused": 1}},
    "reasoning effort": {"messages": TURNS, "reasoning_effort": "none"},
    "kwargs against the body": {
        "messages": TURNS,
        "chat_template_kwargs": {"add_generation_prompt": True},
        "add_generation_prompt": False,
    },
    "tools": {"messages": TURNS[1:2], "tools": [WEATHER], "tool_choice": "none"},
    "minimal and strict tools": {
        "messages": TURNS[1:2],
        "tools": [
            {"type": "function", "function": {"name": "now"}},
            {"type": "function", "function": {"name": "exact", "strict": True}, "defer_loading": True},
        ],
        "tool_choice": "none",
    },
    "tool calls and results": {
        "messages": [
            TURNS[1],
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "rain"}]},
            {"role": "assistant", "content": "", "tool_calls": []},
            {
                "role": "assistant",
                "content": "checking",
                "tool_calls": [
                    {**CALL, "id": "c2", "function": {"name": "weather", "arguments": "not json"}},
                    {**CALL, "id": "c3", "function": {"name": "weather", "arguments": ""}},
                    {**CALL, "id": "c4", "function": {"name": "weather", "arguments": "[1, 2]"}},
                ],
                "reasoning": "two cities",
            },
        ],
        "tools": [WEATHER],
        "tool_choice": "none",
    },
    "text parts and names": {
        "messages": [
            {
                "role": "user",
                "name": "ann",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": ""}],
            },
            {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}], "refusal": None, "x": 1},
            {"role": "user", "content": [{"type": "text", "text": "b"}, {"type": "text", "text": "c"}]},
        ]
    },
    "developer role": {
        "messages": [
            {"role": "system", "content": "first"},
            {"role": "user", "content": "hi"},
            {"role": "developer", "content": "rules"},
            {"role": "user", "content": "go"},
        ]
    },
    "billing header": {
        "messages": [
            {"role": "system", "content": "x-anthropic-billing-header: cch=123\nyou are helpful"},
            {"role": "user", "content": "hi"},
        ]
    },
}


def with_template(source: Path, directory: Path, template: str | None) -> Path:
    directory.mkdir()
    for file in source.iterdir():
        (directory / file.name).write_bytes(file.read_bytes())
    if template is not None:
        (directory / "chat_template.jinja").write_text(template)
    return directory


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from motor.engine.tiny_model import build_tiny_model

    root = tmp_path_factory.mktemp("chat")
    tiny = build_tiny_model(root / "tiny", seed=0)
    return {
        "chatml": tiny,
        "tools": with_template(tiny, root / "tools", TOOLS_TEMPLATE),
        "parts": with_template(tiny, root / "parts", PARTS_TEMPLATE),
    }


def vllm_ids(model: Path, bodies: list[dict[str, Any]]) -> list[list[int]]:
    """The prompt token ids vLLM's chat preprocessing gives each body."""
    from vllm.config import ModelConfig, VllmConfig
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.renderers import renderer_from_config
    from vllm.renderers.inputs.preprocess import extract_prompt_components
    from vllm.renderers.online_renderer import OnlineRenderer

    config = ModelConfig(model=str(model), tokenizer=str(model))
    renderer = OnlineRenderer(
        config,
        renderer_from_config(VllmConfig(model_config=config)),
        request_logger=None,
        chat_template=None,
        chat_template_content_format="auto",
    )

    async def render(body: dict[str, Any]) -> list[int]:
        result = await renderer.render_chat(ChatCompletionRequest(model="tiny", **copy.deepcopy(body)))
        assert isinstance(result, tuple), f"vLLM refused the body: {result}"
        (engine_input,) = result[1]
        return list(extract_prompt_components(config, engine_input).token_ids)

    async def render_all() -> list[list[int]]:
        return [await render(body) for body in bodies]

    return asyncio.run(render_all())


@pytest.mark.parametrize("template", ["chatml", "tools", "parts"])
def test_chat_prompts_are_the_token_ids_vllm_renders(models: dict[str, Path], template: str) -> None:
    if not importable("vllm"):
        pytest.skip("vLLM is not installed")
    names = list(BODIES)
    expected = vllm_ids(models[template], [BODIES[name] for name in names])
    tokenizer = HfPromptTokenizer(str(models[template]))
    for name, ids in zip(names, expected, strict=True):
        body = copy.deepcopy(BODIES[name])
        assert tokenizer.prompt_ids(body, "chat") == ids, f"{template} template, {name}"
        assert body == BODIES[name], "the coordinator renders without changing the body it forwards"
