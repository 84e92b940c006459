"""Node manager ↔ controller messages: `POST /controller/register`, `/controller/heartbeat`,
`/controller/terminate_instance`, and the instance listing `GET /controller/instances`.

A registration or heartbeat carries `Authorization: Bearer <credential>` with the credential of the instance it
names (`motor.protocol.credentials.instance_credential`); terminating and listing instances carry the controller
token (MOTOR_CONTROLLER_TOKEN). A missing or wrong one is HTTP 401. A registration naming addresses outside the
controller's registration policy (`motor.protocol.specs.RegistrationPolicy`) is HTTP 403 with error code
`address_not_allowed`. A heartbeat for an instance the controller does not know is HTTP 404 with error code
`unknown_instance`: the node manager then registers again.
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from motor.protocol.instances import Endpoint, Instance, InstanceRole, InstanceStatus

EngineState = Literal["starting", "healthy", "unhealthy", "crash_looping", "stopped"]
"""What a node manager knows about its engine: `starting` until the first healthy probe, `healthy`,
`unhealthy` (probe failing, or crashed and waiting to be restarted), `crash_looping` (it exited before it became
healthy on its last starts, and is restarted with a growing back-off), `stopped` (terminated on purpose)."""
EngineFailure = Field(
    default=None,
    max_length=4000,
    description="crash_looping: how the engine's last start ended (exit code, last lines of its log)",
)

UNKNOWN_INSTANCE = "unknown_instance"


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Registration(Message):
    instance_id: str = Field(min_length=1, description="stable name of the instance, e.g. prefill-0")
    role: InstanceRole
    engine_id: str = Field(min_length=1)
    model_name: str
    node_manager_url: str = Field(description="where the controller reaches this node manager")
    endpoints: list[Endpoint] = Field(min_length=1)
    engine_state: EngineState
    engine_restarts: int = Field(default=0, ge=0)
    engine_failure: str | None = EngineFailure


class Heartbeat(Message):
    instance_id: str
    engine_state: EngineState
    engine_restarts: int = Field(default=0, ge=0)
    engine_failure: str | None = EngineFailure


class InstanceAck(Message):
    """The answer to a registration or heartbeat: the instance's status after applying it."""

    instance_id: str
    status: InstanceStatus


class TerminateRequest(Message):
    instance_id: str
    reason: str = ""


class TerminateResult(Message):
    instance_id: str
    node_manager_stopped: bool = Field(description="false when the node manager could not be reached")


class InstanceView(Message):
    instance: Instance
    node_manager_url: str
    engine_state: EngineState
    engine_restarts: int
    engine_failure: str | None = EngineFailure
    registrations: int = Field(description="registrations this controller process accepted for the instance")
    seconds_since_heartbeat: float


class CoordinatorLinkView(Message):
    url: str
    acknowledged_events: int = Field(
        description="events the coordinator acknowledged since the controller started"
    )
    pending: bool = Field(description="an event is waiting to be acknowledged")
    last_error: str | None = None
    version: int | None = Field(
        default=None, description="the coordinator's instance-set version at the last ack"
    )


class ControllerState(Message):
    instances: list[InstanceView]
    coordinators: list[CoordinatorLinkView]


class ErrorDetail(Message):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorBody(Message):
    """OpenAI-style error body every control-plane endpoint answers failures with."""

    error: ErrorDetail


def bearer(token: str) -> dict[str, str]:
    """The header that authenticates a call with a token or an instance credential."""
    return {"Authorization": f"Bearer {token}"}
