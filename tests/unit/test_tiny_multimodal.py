import hashlib
import io
import json
from pathlib import Path

import pytest

from tests.installs import importable, needs_install

needs_torch = needs_install(
    importable("torch", "transformers", "tokenizers", "PIL"),
    "torch, transformers, tokenizers and pillow (the vllm extra) are not installed: scripts/setup_dev.sh installs "
    "them",
)


def digests(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def png(width: int, height: int, seed: int):  # -> PIL.Image.Image, read back from PNG bytes
    import random

    from PIL import Image

    rng = random.Random(seed)
    image = Image.frombytes(
        "RGB", (width, height), bytes(rng.randrange(256) for _ in range(width * height * 3))
    )
    data = io.BytesIO()
    image.save(data, format="PNG")
    return Image.open(io.BytesIO(data.getvalue()))


@needs_torch
def test_tiny_multimodal_is_deterministic_offline_and_usable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoConfig, AutoProcessor, Blip2ForConditionalGeneration

    from motor.engine.tiny_model import CHAT_TEMPLATE, VOCAB_SIZE
    from motor.engine.tiny_multimodal import IMAGE_TOKEN, build_tiny_multimodal

    first = build_tiny_multimodal(tmp_path / "a", seed=0)
    again = build_tiny_multimodal(tmp_path / "b", seed=0)
    other = build_tiny_multimodal(tmp_path / "c", seed=1)
    assert digests(first) == digests(again)
    assert digests(first)["model.safetensors"] != digests(other)["model.safetensors"]

    config = AutoConfig.from_pretrained(first)
    assert config.model_type == "blip-2" and config.num_query_tokens == 8
    assert config.text_config.model_type == "opt"
    assert config.text_config.hidden_size // config.text_config.num_attention_heads == 64
    raw = json.loads((first / "config.json").read_text())
    assert raw["architectures"] == ["Blip2ForConditionalGeneration"]

    processor = AutoProcessor.from_pretrained(first)
    tokenizer = processor.tokenizer
    image_id = tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)
    assert len(tokenizer) == VOCAB_SIZE + 1 == config.text_config.vocab_size
    assert image_id == VOCAB_SIZE == config.image_token_index
    assert tokenizer.chat_template == CHAT_TEMPLATE
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"

    inputs = processor(images=png(64, 64, seed=1), text=chat, return_tensors="pt")
    assert list(inputs["pixel_values"].shape) == [1, 3, 32, 32]
    ids = inputs["input_ids"][0].tolist()
    assert ids.count(image_id) == 8, ids
    assert ids[:8] == [image_id] * 8, "BLIP-2 puts the image tokens at the prompt's start"
    text_only = processor(text=chat, return_tensors="pt")["input_ids"][0].tolist()
    assert ids[8:] == text_only

    model = Blip2ForConditionalGeneration.from_pretrained(first).eval()
    other_image = processor(images=png(64, 64, seed=2), text=chat, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=6, do_sample=False)
        out_again = model.generate(**inputs, max_new_tokens=6, do_sample=False)
        logits = model(**inputs).logits[0, -1]
        other_logits = model(**other_image).logits[0, -1]
    assert out[0, : len(ids)].tolist() == ids, "generate returns the prompt, then the new tokens"
    new_tokens = out[0, len(ids) :].tolist()
    assert len(new_tokens) == 6 and max(new_tokens) < len(tokenizer)
    assert out.tolist() == out_again.tolist()
    assert not torch.allclose(logits, other_logits, atol=1e-3), "output must depend on the image"
    assert float(logits.std()) > 0.1, "logits must not be flat"
