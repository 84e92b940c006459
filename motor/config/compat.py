"""pyMotor's alternate spellings and the legacy `model_config` engine section, folded into motor's form.

Keys pyMotor knows but motor does not implement are listed in pymotor_keys.py.
"""

from typing import Any

ENGINE_SECTIONS = ("motor_engine_prefill_config", "motor_engine_decode_config", "motor_engine_union_config")

NODE_MANAGER_KEY = "motor_nodemanger_config"
NODE_MANAGER_KEY_ALT = "motor_nodemanager_config"

LEGACY_MODEL_KEYS = {
    "model_name": "served_model_name",
    "model_path": "model",
    "npu_mem_utils": "gpu_memory_utilization",
}
LEGACY_PARALLEL_KEYS = {
    "dp_size": "data_parallel_size",
    "tp_size": "tensor_parallel_size",
    "pp_size": "pipeline_parallel_size",
}


def engine_option(engine_config: dict[str, Any], name: str) -> Any:
    """Read an engine option written with underscores or dashes (`max_model_len` or `max-model-len`)."""
    if name in engine_config:
        return engine_config[name]
    return engine_config.get(name.replace("_", "-"))


def merge_legacy_model_config(section_path: str, section: dict[str, Any], warnings: list[str]) -> None:
    """Fold a deprecated `model_config` into `engine_config` (engine_config wins), warning as it goes."""
    legacy = section.pop("model_config", None)
    if legacy is None:
        return
    warnings.append(f"{section_path}.model_config: deprecated; move these settings into engine_config")
    if not isinstance(legacy, dict):
        warnings.append(f"{section_path}.model_config: not an object; ignored")
        return
    engine_config = section.setdefault("engine_config", {})
    if not isinstance(engine_config, dict):
        return
    translated: dict[str, Any] = {}
    for key, value in legacy.items():
        if key == "parallel_config" and isinstance(value, dict):
            for sub_key, sub_value in value.items():
                translated[LEGACY_PARALLEL_KEYS.get(sub_key, sub_key)] = sub_value
        else:
            translated[LEGACY_MODEL_KEYS.get(key, key)] = value
    for key, value in translated.items():
        current = engine_option(engine_config, key)
        if current is None:
            engine_config[key] = value
        elif current != value:
            warnings.append(
                f"{section_path}.model_config: {key}={value!r} conflicts with engine_config ({current!r}); "
                "engine_config wins"
            )
