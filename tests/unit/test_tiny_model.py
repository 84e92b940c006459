import hashlib
import json
from pathlib import Path

import pytest

from motor.engine.tiny_model import CHAT_TEMPLATE, VOCAB_SIZE, synthetic_corpus
from tests.installs import importable, needs_install

needs_torch = needs_install(
    importable("torch", "transformers", "tokenizers"),
    "torch, transformers and tokenizers (the vllm extra) are not installed: scripts/setup_dev.sh installs it",
)


def digests(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def test_corpus_is_a_function_of_the_seed() -> None:
    assert synthetic_corpus(1, lines=50) == synthetic_corpus(1, lines=50)
    assert synthetic_corpus(1, lines=50) != synthetic_corpus(2, lines=50)


@needs_torch
def test_tiny_model_is_deterministic_offline_and_usable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from motor.engine.tiny_model import build_tiny_model

    first = build_tiny_model(tmp_path / "a", seed=0)
    again = build_tiny_model(tmp_path / "b", seed=0)
    other = build_tiny_model(tmp_path / "c", seed=1)
    assert digests(first) == digests(again)
    assert digests(first)["model.safetensors"] != digests(other)["model.safetensors"]

    config = json.loads((first / "config.json").read_text())
    assert config["model_type"] == "qwen2"
    assert (config["head_dim"], config["num_hidden_layers"], config["hidden_size"]) == (64, 2, 256)
    assert config["vocab_size"] == VOCAB_SIZE

    tokenizer = AutoTokenizer.from_pretrained(first)
    assert len(tokenizer) == VOCAB_SIZE
    text = "Prefill and decode share the KV cache, 2048 tokens!"
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.decode(ids) == text
    assert max(ids) < VOCAB_SIZE
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.chat_template == CHAT_TEMPLATE

    model = AutoModelForCausalLM.from_pretrained(first).eval()
    with torch.no_grad():
        a = model(torch.tensor([tokenizer("the model is")["input_ids"]])).logits[0, -1]
        b = model(torch.tensor([tokenizer("a model is")["input_ids"]])).logits[0, -1]
    assert int(a.argmax()) != int(b.argmax()) or not torch.allclose(a, b, atol=1e-3), (
        "output must depend on context"
    )
    assert float(a.std()) > 0.1, "logits must not be flat"
