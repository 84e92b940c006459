"""Coordinator supervisor ↔ inference worker messages, one JSON object per line (motor.runtime.channel).

supervisor → worker: `InstanceSet` (the whole set, after every refresh and when the worker is ready).
worker → supervisor: `WorkerReady` once it listens, `InstanceSetAck` for every `InstanceSet` applied.
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


ToWorker = InstanceSet  # one kind so far; more become a union discriminated by `type`, as below
ToSupervisor = Annotated[WorkerReady | InstanceSetAck, Field(discriminator="type")]

TO_WORKER: TypeAdapter[ToWorker] = TypeAdapter(ToWorker)
TO_SUPERVISOR: TypeAdapter[ToSupervisor] = TypeAdapter(ToSupervisor)
