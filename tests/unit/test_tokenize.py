"""Prompt tokenizers: the simulator's gives the very ids the sim computes for a body; a model directory's gives
what its Hugging Face tokenizer and chat template give (the library vLLM renders with); unreadable bodies → None."""

from pathlib import Path

import pytest

from motor.engine.sim.config import SimConfig
from motor.engine.sim.openai_protocol import parse_request
from motor.tokenize import SimPromptTokenizer, TokenizerUnavailable, load_prompt_tokenizer, tokenizer_problem
from tests.installs import importable, needs_install

CHATS = [
    {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}]},
    {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
        ]
    },
    {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None}]},
    {"messages": [{"role": "user", "content": "no prompt"}], "add_generation_prompt": False},
]
COMPLETIONS = [{"prompt": "one two, three."}, {"prompt": ["only one"]}, {"prompt": [5, 6, 7]}]


@pytest.mark.parametrize("body", CHATS)
def test_sim_chat_ids_are_the_sims(body: dict) -> None:
    config = SimConfig()
    assert (
        SimPromptTokenizer().prompt_ids(body, "chat") == parse_request("chat", body, config).prompt_token_ids
    )


@pytest.mark.parametrize("body", COMPLETIONS)
def test_sim_completion_ids_are_the_sims(body: dict) -> None:
    config = SimConfig()
    assert (
        SimPromptTokenizer().prompt_ids(body, "completions")
        == parse_request("completion", body, config).prompt_token_ids
    )


@pytest.mark.parametrize(
    ("body", "api"),
    [
        ({"prompt": ["a", "b"]}, "completions"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
            "chat",
        ),
        ({"messages": []}, "chat"),
    ],
)
def test_bodies_it_cannot_reproduce_give_none(body: dict, api: str) -> None:
    assert SimPromptTokenizer().prompt_ids(body, api) is None  # type: ignore[arg-type]


def test_problems_are_named_before_loading(tmp_path: Path) -> None:
    assert tokenizer_problem("sim", None) is None
    assert "engine type 'sglang'" in (tokenizer_problem("sglang", "/m") or "")
    assert "no tokenizer file" in (tokenizer_problem("vllm", str(tmp_path)) or "")
    with pytest.raises(TokenizerUnavailable, match="model path is not set"):
        load_prompt_tokenizer("vllm", None)


@needs_install(
    importable("torch", "transformers", "tokenizers"),
    "torch and transformers (the vllm extra): scripts/setup_dev.sh",
)
def test_model_directory_tokenizer_renders_the_template_as_transformers_does(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from motor.engine.tiny_model import build_tiny_model

    model = build_tiny_model(tmp_path / "m", seed=0)
    reference = AutoTokenizer.from_pretrained(str(model), local_files_only=True)
    tokenizer = load_prompt_tokenizer("vllm", str(model))
    body = CHATS[0]
    text = reference.apply_chat_template(body["messages"], add_generation_prompt=True, tokenize=False)
    assert tokenizer.prompt_ids(body, "chat") == reference.encode(text, add_special_tokens=False)
    assert tokenizer.prompt_ids({"prompt": "one two"}, "completions") == reference.encode("one two")
