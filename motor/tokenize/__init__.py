"""The token ids an engine will see for an OpenAI request body, computed in the coordinator (kv_cache_affinity
hashes them into the engine's block hashes).

- `SimPromptTokenizer`: the simulator's own vocabulary and ChatML rendering (`sim_vocab.py`), with the sim's rules
  for which bodies it reads (tests compare the two);
- `HfPromptTokenizer`: a model directory's Hugging Face tokenizer and chat template, through `transformers`
  (the library vLLM renders chat prompts with): the conversation, tools and template arguments vLLM 0.32 hands the
  template (`vllm_chat.py`), rendered to text, then tokenized without special tokens, as vLLM does for chat;
  completions prompts tokenized with the model's special tokens. tests/unit/test_chat_render_vllm.py compares the
  token ids with vLLM's own chat preprocessing.
A body the coordinator cannot reproduce exactly (several prompts, non-text content parts) gives None: the leg is
then placed by load.
"""

from motor.tokenize.prompt import (
    HfPromptTokenizer,
    PromptTokenizer,
    SimPromptTokenizer,
    TokenizerUnavailable,
    has_chat_template,
    load_prompt_tokenizer,
    tokenizer_problem,
)

__all__ = [
    "HfPromptTokenizer",
    "PromptTokenizer",
    "SimPromptTokenizer",
    "TokenizerUnavailable",
    "has_chat_template",
    "load_prompt_tokenizer",
    "tokenizer_problem",
]
