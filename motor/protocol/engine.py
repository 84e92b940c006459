"""Engine server → node manager: `GET /status` on the engine's status port; what `/v1/models` says serves a model."""

from typing import Literal

from pydantic import BaseModel, ConfigDict

EngineHealth = Literal["initial", "normal", "abnormal"]
"""`initial` until the engine's /health first answers 200, `normal` while it does, `abnormal` once it stopped
answering after that, never answered within the startup timeout, or the engine process exited."""


class EngineStatus(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: EngineHealth


SIM_OWNED_BY = "motor-sim (simulator, not inference)"


def engine_owned_by(engine_type: str) -> str:
    """The `owned_by` of a model served by `engine_type` in `/v1/models`: the engine, and for the simulator
    that it is one."""
    return SIM_OWNED_BY if engine_type == "sim" else engine_type
