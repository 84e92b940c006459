"""Coordinator supervisor ↔ inference worker messages, one JSON object per line (motor.runtime.channel).

supervisor → worker: `InstanceSet` (the whole set, after every refresh and when the worker is ready),
`CircuitState` (the instances whose circuit is open, and those whose successes the supervisor wants to hear of,
after every change and when the worker is ready).
worker → supervisor: `WorkerReady` once it listens, `InstanceSetAck` for every `InstanceSet` applied,
`LegOutcome` for a leg that counts for a circuit breaker.
"""

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from motor.protocol.instances import Instance


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid")


class InstanceSet(Message):
    type: Literal["instances"] = "instances"
    version: int
    instances: list[Instance]


class WorkerReady(Message):
    type: Literal["ready"] = "ready"
    callback_port: int = Field(ge=1, le=65535, description="where this worker takes decode callbacks")


class InstanceSetAck(Message):
    type: Literal["ack"] = "ack"
    version: int


class CircuitState(Message):
    type: Literal["circuits"] = "circuits"
    open: list[str] = Field(description="instance ids whose circuit is open: they get no legs")
    suspects: list[str] = Field(description="instance ids whose successful legs are to be reported")


class LegOutcome(Message):
    type: Literal["leg"] = "leg"
    instance_id: str
    ok: bool


ToWorker = Annotated[InstanceSet | CircuitState, Field(discriminator="type")]
ToSupervisor = Annotated[WorkerReady | InstanceSetAck | LegOutcome, Field(discriminator="type")]

TO_WORKER: TypeAdapter[ToWorker] = TypeAdapter(ToWorker)
TO_SUPERVISOR: TypeAdapter[ToSupervisor] = TypeAdapter(ToSupervisor)
