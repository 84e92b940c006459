"""One engine type as motor launches it, and the registry engine types are looked up in by `engine_type`.

Adding an engine type is one module defining its `EngineType` (whose `launch` builds an `EngineSpec` from an
`EngineLaunchRequest`) and one `register(...)` of it in this package's `__init__`.
"""

from collections.abc import Callable
from dataclasses import dataclass

from motor.deploy.engines.request import EngineLaunchRequest
from motor.protocol.specs import EngineSpec


@dataclass(frozen=True)
class EngineType:
    name: str  # the config's engine_type
    model_option: str  # the option naming the model weights (`model`, SGLang's `model-path`)
    launch: Callable[[EngineLaunchRequest], EngineSpec]  # the instance's command, environment and files
    needs_model: bool = True  # False when the engine serves without weights (the simulator)


class DuplicateEngineError(ValueError):
    pass


REGISTRY: dict[str, EngineType] = {}


def register(engine: EngineType) -> EngineType:
    if engine.name in REGISTRY:
        raise DuplicateEngineError(f"engine type {engine.name!r} is registered twice")
    REGISTRY[engine.name] = engine
    return engine


def lookup(name: str) -> EngineType | None:
    return REGISTRY.get(name)
