"""pyMotor's alternate spellings and the legacy `model_config` engine section, folded into motor's form.

Keys pyMotor knows but motor does not implement are listed in pymotor_keys.py.
"""

from typing import Any

ENGINE_SECTIONS = (
    "motor_engine_prefill_config",
    "motor_engine_decode_config",
    "motor_engine_union_config",
    "motor_engine_encode_config",
)

NODE_MANAGER_KEY = "motor_nodemanger_config"
NODE_MANAGER_KEY_ALT = "motor_nodemanager_config"

# pyMotor's `model_config` keys → the engine's own option names, per engine type (vLLM's also for the simulator)
LEGACY_MODEL_KEYS = {
    "vllm": {
        "model_name": "served_model_name",
        "model_path": "model",
        "npu_mem_utils": "gpu_memory_utilization",
    },
    "sglang": {
        "model_name": "served_model_name",
        "model_path": "model_path",
        "npu_mem_utils": "mem_fraction_static",
    },
}
LEGACY_PARALLEL_KEYS = {
    "vllm": {
        "dp_size": "data_parallel_size",
        "tp_size": "tensor_parallel_size",
        "pp_size": "pipeline_parallel_size",
        "pcp_size": "prefill_context_parallel_size",
        "dp_rpc_port": "data_parallel_rpc_port",
        "enable_ep": "enable_expert_parallel",
    },
    "sglang": {"dp_size": "dp_size", "tp_size": "tp_size", "pp_size": "pp_size"},
}
# parallel keys with no option of their own: world_size is dp × tp × pp (checked), the others are SGLang's gaps
DERIVED_PARALLEL_KEYS = {"world_size"}
PARALLEL_SECTIONS = {
    "motor_engine_prefill_config": "prefill_parallel_config",
    "motor_engine_decode_config": "decode_parallel_config",
}


def engine_option(engine_config: dict[str, Any], name: str) -> Any:
    """Read an engine option written with underscores or dashes (`max_model_len` or `max-model-len`)."""
    if name in engine_config:
        return engine_config[name]
    return engine_config.get(name.replace("_", "-"))


def merge_legacy_model_config(section_path: str, section: dict[str, Any], warnings: list[str]) -> None:
    """Fold pyMotor's `model_config` (model name and path, memory share, the role's parallel sizes) into
    `engine_config` under the engine type's own option names (engine_config wins), warning as it goes."""
    legacy = section.pop("model_config", None)
    if legacy is None:
        return
    where = f"{section_path}.model_config"
    warnings.append(f"{where}: folded into engine_config (motor's form: the engine's own options there)")
    if not isinstance(legacy, dict):
        warnings.append(f"{where}: not an object; ignored")
        return
    engine_config = section.setdefault("engine_config", {})
    if not isinstance(engine_config, dict):
        return
    engine = "sglang" if section.get("engine_type") == "sglang" else "vllm"
    model_keys, parallel_keys = LEGACY_MODEL_KEYS[engine], LEGACY_PARALLEL_KEYS[engine]
    own = PARALLEL_SECTIONS.get(section_path)
    translated: dict[str, Any] = {}
    parallel = _role_parallel(legacy, own, where, warnings)
    for key, value in legacy.items():
        if key not in ("parallel_config", *PARALLEL_SECTIONS.values()):
            translated[model_keys.get(key, key)] = value
    for key, value in parallel.items():
        if key in parallel_keys:
            translated[parallel_keys[key]] = value
        elif key not in DERIVED_PARALLEL_KEYS:
            warnings.append(
                f"{where}: {key} has no {engine} option; ignored (set the engine's own in engine_config)"
            )
    _check_world_size(parallel, where, warnings)
    for key, value in translated.items():
        current = engine_option(engine_config, key)
        if current is None:
            engine_config[key] = value
        elif current != value:
            warnings.append(
                f"{where}: {key}={value!r} conflicts with engine_config ({current!r}); engine_config wins"
            )


def _role_parallel(
    legacy: dict[str, Any], own: str | None, where: str, warnings: list[str]
) -> dict[str, Any]:
    """The role's parallel sizes: its own `<role>_parallel_config`, else `parallel_config`."""
    for key in PARALLEL_SECTIONS.values():
        if key in legacy and key != own:
            warnings.append(f"{where}.{key}: not this section's role; ignored")
    chosen = legacy.get(own) if own is not None and own in legacy else legacy.get("parallel_config")
    return chosen if isinstance(chosen, dict) else {}


def _check_world_size(parallel: dict[str, Any], where: str, warnings: list[str]) -> None:
    world = parallel.get("world_size")
    sizes = [parallel.get(k, 1) for k in ("dp_size", "tp_size", "pp_size")]
    if world is None or not all(isinstance(v, int) for v in (world, *sizes)):
        return
    product = sizes[0] * sizes[1] * sizes[2]
    if world != product:
        warnings.append(
            f"{where}: world_size {world} is not dp_size × tp_size × pp_size ({product}); ignored"
        )
