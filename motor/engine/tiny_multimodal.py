"""A tiny random-weight BLIP-2 (vision tower + Q-Former + OPT language model) with motor's own tokenizer and an
`<image>` token, built offline for encoder-disaggregation (EPD) tests and demos.

Why BLIP-2: on the CPU vLLM build (no torchvision) it is one of the few multimodal models whose vLLM module
imports and whose engine starts: its image processor needs no torchvision and its number of image tokens is
simply `num_query_tokens` (8 here), whatever the image's size. Each image becomes `num_query_tokens` `<image>`
placeholders at the prompt's start, whose embeddings the encoder (vision tower → Q-Former → projection)
computes — the tensor an encode instance hands to the prefill side through vLLM's EC connector.

Like `motor.engine.tiny_model` it is not trained: its output is deterministic noise that depends on the image
and the text, and everything is a function of the seed. Needs torch, transformers and tokenizers (the `vllm`
extra).
"""

from dataclasses import dataclass
from pathlib import Path

from motor.engine.tiny_model import ENDOFTEXT, chat_tokenizer

IMAGE_TOKEN = "<image>"


@dataclass(frozen=True)
class TinyMultimodalShape:
    image_size: int = 32  # every image is resized to image_size × image_size
    patch_size: int = 8
    vision_hidden_size: int = 64
    vision_layers: int = 2
    vision_heads: int = 2
    qformer_hidden_size: int = 64
    qformer_layers: int = 2
    qformer_heads: int = 2
    num_query_tokens: int = 8  # image tokens per image
    hidden_size: int = 128  # the language model's; head_dim = hidden_size / heads = 64 (vLLM CPU supports it)
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    ffn_dim: int = 256
    max_position_embeddings: int = 2048
    init_std: float = 0.2  # large, so the output depends on the whole context


def build_tiny_multimodal(
    out_dir: Path, *, seed: int = 0, shape: TinyMultimodalShape = TinyMultimodalShape()
) -> Path:
    """Write the model, tokenizer (with `<image>` and the chat template), image processor and processor to
    `out_dir` (created); return it."""
    import torch
    from transformers import (
        Blip2Config,
        Blip2ForConditionalGeneration,
        Blip2Processor,
        Blip2QFormerConfig,
        Blip2VisionConfig,
        BlipImageProcessorPil,
        GenerationConfig,
        OPTConfig,
    )

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = chat_tokenizer(seed, shape.max_position_embeddings, (IMAGE_TOKEN,))
    image_id = tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)
    eos_id = tokenizer.convert_tokens_to_ids(ENDOFTEXT)

    vision = Blip2VisionConfig(
        hidden_size=shape.vision_hidden_size,
        intermediate_size=2 * shape.vision_hidden_size,
        num_hidden_layers=shape.vision_layers,
        num_attention_heads=shape.vision_heads,
        image_size=shape.image_size,
        patch_size=shape.patch_size,
    )
    qformer = Blip2QFormerConfig(
        hidden_size=shape.qformer_hidden_size,
        intermediate_size=2 * shape.qformer_hidden_size,
        num_hidden_layers=shape.qformer_layers,
        num_attention_heads=shape.qformer_heads,
        cross_attention_frequency=1,
        encoder_hidden_size=shape.vision_hidden_size,
        max_position_embeddings=64,
    )
    text = OPTConfig(
        vocab_size=len(tokenizer),  # every id the model can sample detokenizes
        hidden_size=shape.hidden_size,
        word_embed_proj_dim=shape.hidden_size,
        ffn_dim=shape.ffn_dim,
        num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads,
        max_position_embeddings=shape.max_position_embeddings,
        init_std=shape.init_std,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
        tie_word_embeddings=True,
    )
    config = Blip2Config(
        vision_config=vision.to_dict(),
        qformer_config=qformer.to_dict(),
        text_config=text.to_dict(),
        num_query_tokens=shape.num_query_tokens,
        image_token_index=image_id,
        tie_word_embeddings=True,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = Blip2ForConditionalGeneration(config).to(torch.float32).eval()
    model.generation_config = GenerationConfig(bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=eos_id)
    model.save_pretrained(out_dir, safe_serialization=True)

    image_processor = BlipImageProcessorPil(size={"height": shape.image_size, "width": shape.image_size})
    # Blip2Processor keeps no chat template of its own: the tokenizer's is the one vLLM (and transformers) apply.
    processor = Blip2Processor(
        image_processor=image_processor, tokenizer=tokenizer, num_query_tokens=shape.num_query_tokens
    )
    processor.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir
