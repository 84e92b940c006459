"""Engine server → node manager: `GET /status` on the engine's status port."""

from typing import Literal

from pydantic import BaseModel, ConfigDict

EngineHealth = Literal["initial", "normal", "abnormal"]
"""`initial` until the engine's /health first answers 200, `normal` while it does, `abnormal` once it stopped
answering after that, never answered within the startup timeout, or the engine process exited."""


class EngineStatus(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: EngineHealth
