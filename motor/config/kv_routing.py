"""Whole-topology rules of scheduler_type kv_cache_affinity (pure): the coordinator tokenizes prompts and hashes
their blocks itself, so the engines that publish KV events (the prefill or the union role: a topology has one of
them) must be engines whose tokenizer it can load and whose blocks it can hash alike.

- engine type: the coordinator tokenizes for vLLM (the model directory's Hugging Face tokenizer) and for the
  simulator (its own vocabulary), for no other engine;
- vLLM: the model (or `tokenizer`) path is set, the tokenizer is the Hugging Face one (`tokenizer_mode` auto, hf or
  slow; vLLM's mistral and custom modes tokenize otherwise), and `block_size` is set: vLLM picks its default from
  the platform and attention backend (128 on its CPU backend, 16 on CUDA, others for MLA models and plugins);
- the prefix-caching hash algorithm is one motor computes (sha256, vLLM's default, or sha256_cbor);
- with the KV pool on, prefill and decode engines hash alike: the pool's keys are the engines' block hashes, and
  the coordinator's pool tier asks for the prefill engines' (`PYTHONHASHSEED` agreement is the pool's own rule).
Whether the tokenizer files are there is looked at by `motor validate` / `motor deploy` for local jobs, where the
coordinator reads them from this machine (motor.cli.tokenizer_check).
"""

from typing import Any

from motor.config.compat import engine_option
from motor.config.errors import ConfigIssue
from motor.config.kv_events import DEFAULT_HASH_ALGORITHM, KV_EVENTS_ROLES, kv_events_enabled
from motor.config.models import EngineSection, UserConfig
from motor.config.roles import Role
from motor.kv.block_hashes import ALGORITHMS

TOKENIZED_ENGINES = ("vllm", "sim")
HF_TOKENIZER_MODES = ("auto", "hf", "slow")
WHY = "scheduler_type kv_cache_affinity"


def check_kv_routing(
    user: UserConfig,
    sections: dict[Role, tuple[str, EngineSection]],
    engine_configs: dict[Role, dict[str, Any]],
    pool: bool,
    issues: list[ConfigIssue],
) -> None:
    if not kv_events_enabled(user):
        return
    for role, (path, section) in sections.items():
        if role in KV_EVENTS_ROLES:
            _check_publisher(path, section, engine_configs[role], issues)
    if pool and "prefill" in sections and "decode" in sections:
        _check_pool_hashing(sections, engine_configs, issues)


def _check_publisher(
    path: str, section: EngineSection, config: dict[str, Any], issues: list[ConfigIssue]
) -> None:
    engine = section.engine_type
    if engine not in TOKENIZED_ENGINES:
        issues.append(
            ConfigIssue(
                f"{path}.engine_type",
                f"{WHY} needs the coordinator to tokenize prompts as the engine does, which it can for "
                f"{' and '.join(TOKENIZED_ENGINES)}, not {engine!r}: choose scheduler_type prefix_affinity or "
                "load_balance for these engines",
            )
        )
        return
    algorithm = engine_option(config, "prefix_caching_hash_algo")
    if algorithm is not None and algorithm not in ALGORITHMS:
        issues.append(
            ConfigIssue(
                f"{path}.engine_config.prefix_caching_hash_algo",
                f"{WHY}: the coordinator hashes blocks with {' or '.join(sorted(ALGORITHMS))}, not "
                f"{algorithm!r}: set one of them (or remove it: {DEFAULT_HASH_ALGORITHM} is vLLM's default)",
            )
        )
    if engine != "vllm":
        return
    if not engine_option(config, "model"):
        issues.append(
            ConfigIssue(
                f"{path}.engine_config.model",
                f"{WHY}: the coordinator loads the tokenizer from the model directory: set model to it",
            )
        )
    mode = engine_option(config, "tokenizer_mode")
    if mode is not None and mode not in HF_TOKENIZER_MODES:
        issues.append(
            ConfigIssue(
                f"{path}.engine_config.tokenizer_mode",
                f"{WHY}: the coordinator tokenizes with the model's Hugging Face tokenizer; vLLM's {mode!r} mode "
                f"tokenizes otherwise: use {' / '.join(HF_TOKENIZER_MODES)}, or another scheduler_type",
            )
        )
    if engine_option(config, "block_size") is None:
        issues.append(
            ConfigIssue(
                f"{path}.engine_config.block_size",
                f"{WHY}: set the KV block size: vLLM picks its default from the platform and attention backend "
                "(128 on its CPU backend, 16 on CUDA, others for MLA models and plugins), and the coordinator "
                "must hash the same blocks",
            )
        )


def _check_pool_hashing(
    sections: dict[Role, tuple[str, EngineSection]],
    engine_configs: dict[Role, dict[str, Any]],
    issues: list[ConfigIssue],
) -> None:
    prefill, decode = (
        engine_option(engine_configs[role], "prefix_caching_hash_algo") or DEFAULT_HASH_ALGORITHM
        for role in ("prefill", "decode")
    )
    if prefill != decode:
        issues.append(
            ConfigIssue(
                f"{sections['decode'][0]}.engine_config.prefix_caching_hash_algo",
                f"{decode!r} differs from the prefill side's {prefill!r}: with the KV pool the engines find "
                "each other's blocks by their hashes (and the coordinator asks the pool for the prefill "
                "engines'): set one algorithm on both",
            )
        )
