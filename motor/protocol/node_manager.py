"""Controller → node manager messages: `POST /node-manager/stop`, `GET /node-manager/status`.

`/node-manager/stop` requires the node manager's instance credential as a bearer token (401 otherwise): the
controller derives it from its token.
"""

from pydantic import BaseModel, ConfigDict, Field

from motor.protocol.controller import EngineState
from motor.protocol.instances import InstanceRole


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StopRequest(Message):
    reason: str = ""


class StopResult(Message):
    instance_id: str
    engine_stopped: bool


class NodeManagerStatus(Message):
    instance_id: str
    role: InstanceRole
    engine_state: EngineState
    engine_pid: int | None = None
    engine_restarts: int = Field(ge=0)
    registered: bool = Field(description="the controller acknowledged this node manager's registration")


ENGINE_PID_FILE = "engine.pid"


class EngineProcessRecord(Message):
    """`engine.pid` in the node manager's MOTOR_RUN_DIR, rewritten at every engine start: lets whoever deployed
    the node manager find (and verify, by start time) an engine process group that outlived it."""

    pid: int
    start_ticks: int = Field(description="field 22 of /proc/<pid>/stat: start time in clock ticks since boot")
