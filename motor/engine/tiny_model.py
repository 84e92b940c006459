"""A tiny random-weight Qwen2-style causal LM with its own tokenizer, built offline for tests and demos.

It is not a trained model: its output is noise, but deterministic noise that depends on the whole context
(weights drawn with a large `initializer_range`), which is what checks of the KV data path need — decode
output equals aggregated output only when the prompt's KV really arrived. `head_dim` 64 is a size vLLM's CPU
attention backend supports. The tokenizer is a byte-level BPE trained on a synthetic corpus, so any text
tokenizes, plus ChatML special tokens and chat template. Everything is a function of the seed.

Needs torch, transformers and tokenizers (the `vllm` extra).
"""

import random
from dataclasses import dataclass
from pathlib import Path

VOCAB_SIZE = 512
ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [ENDOFTEXT, IM_START, IM_END]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
_SYLLABLES = [c + v for c in "bcdfghjklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou", "ee")]
_COMMON_WORDS_TEXT = (
    "the of and to in is you that it he was for on are as with his they at be this have from or one had by "
    "word but not what all were we when your can said there use an each which she do how their if will up "
    "other about out many then them these so some her would make like him into time has look two more write "
    "go see number no way could people my than first water been call who oil its now find long down day did "
    "get come made may part model token prompt cache decode prefill engine request stream"
)
_COMMON_WORDS = _COMMON_WORDS_TEXT.split(" ")


@dataclass(frozen=True)
class TinyModelShape:
    hidden_size: int = 256
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 64
    intermediate_size: int = 512
    vocab_size: int = VOCAB_SIZE
    max_position_embeddings: int = 4096
    initializer_range: float = 0.2


def synthetic_corpus(seed: int, lines: int = 4000) -> list[str]:
    """Sentences of common English words, pseudo-words, digits and punctuation, drawn from `seed`."""
    rng = random.Random(seed)
    pseudo_words = ["".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 3))) for _ in range(600)]
    corpus = []
    for _ in range(lines):
        words = []
        for _ in range(rng.randint(4, 16)):
            roll = rng.random()
            if roll < 0.55:
                words.append(rng.choice(_COMMON_WORDS))
            elif roll < 0.9:
                words.append(rng.choice(pseudo_words))
            else:
                words.append(str(rng.randint(0, 9999)))
        sentence = " ".join(words)
        corpus.append(sentence[0].upper() + sentence[1:] + rng.choice([".", "?", "!", ",", ":"]))
    return corpus


def train_tokenizer(seed: int):  # -> tokenizers.Tokenizer
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=1,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(synthetic_corpus(seed), trainer=trainer)
    if tokenizer.get_vocab_size() != VOCAB_SIZE:
        raise RuntimeError(
            f"the tokenizer came out with {tokenizer.get_vocab_size()} tokens instead of {VOCAB_SIZE}; "
            "the synthetic corpus is too small for the merges"
        )
    return tokenizer


def chat_tokenizer(seed: int, model_max_length: int, extra_special_tokens: tuple[str, ...] = ()):
    """The seed's tokenizer as a transformers fast tokenizer: `<|endoftext|>` as bos, eos and pad, the ChatML
    tokens and `extra_special_tokens` (appended after them, so the trained ids do not move) and the chat
    template. -> transformers.PreTrainedTokenizerFast"""
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=train_tokenizer(seed),
        bos_token=ENDOFTEXT,
        eos_token=ENDOFTEXT,
        pad_token=ENDOFTEXT,
        additional_special_tokens=[IM_START, IM_END, *extra_special_tokens],
        model_max_length=model_max_length,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_model(out_dir: Path, *, seed: int = 0, shape: TinyModelShape = TinyModelShape()) -> Path:
    """Write the model, tokenizer and chat template to `out_dir` (created); return it."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    tokenizer = chat_tokenizer(seed, shape.max_position_embeddings)
    eos_id = tokenizer.convert_tokens_to_ids(ENDOFTEXT)

    config = Qwen2Config(
        vocab_size=shape.vocab_size,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads,
        head_dim=shape.head_dim,
        max_position_embeddings=shape.max_position_embeddings,
        initializer_range=shape.initializer_range,
        tie_word_embeddings=True,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).to(torch.float32).eval()
    model.generation_config = GenerationConfig(bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=eos_id)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    return out_dir
