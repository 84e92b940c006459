"""The engine command of an instance: its role's engine section plus what the topology decides (an
`EngineLaunchRequest`) → an `EngineSpec`, built by the instance's engine type, looked up by `engine_type`.

The engine section's `engine_config` holds the engine's own CLI options (`options`); motor injects what it owns
(host and port, the served model name, and what each engine type adds: see `vllm`, `sim`, `sglang`). Every
engine runs under `python -m motor.engine.server`. Pure: the node manager only runs what this returns.
"""

from motor.deploy.engines import sglang, sim, vllm
from motor.deploy.engines.command import served_model_name
from motor.deploy.engines.options import option_flags
from motor.deploy.engines.registry import REGISTRY, DuplicateEngineError, EngineType, lookup, register
from motor.deploy.engines.request import EngineLaunchRequest, LaunchError
from motor.deploy.engines.vllm import with_engine_id
from motor.protocol.specs import EngineSpec

__all__ = [
    "REGISTRY",
    "DuplicateEngineError",
    "EngineLaunchRequest",
    "EngineType",
    "LaunchError",
    "engine_spec",
    "known_engine_types",
    "lookup",
    "option_flags",
    "register",
    "served_model_name",
    "with_engine_id",
]

# Registered here, in the order an unknown engine type's error lists them.
register(vllm.VLLM)
register(sim.SIM)
register(sglang.SGLANG)


def known_engine_types() -> list[str]:
    return list(REGISTRY)


def engine_spec(request: EngineLaunchRequest) -> EngineSpec:
    """The command, environment and files that start `request.instance_id` in `request.run_dir`."""
    spec = request.role_spec
    engine = lookup(spec.engine_type)
    if engine is None:
        raise LaunchError(
            f"{spec.section_path}.engine_type",
            f"unknown engine type {spec.engine_type!r}; use one of {', '.join(known_engine_types())}",
        )
    return engine.launch(request)
