"""Instance set messages: controller → coordinator `POST /instances/refresh`."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

InstanceRole = Literal["prefill", "decode", "union", "encode"]
InstanceStatus = Literal["initial", "active", "inactive", "deleted"]


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Endpoint(Message):
    host: str
    port: int = Field(ge=1, le=65535, description="the engine's OpenAI API port")
    status_port: int | None = Field(default=None, ge=1, le=65535)
    bootstrap_port: int | None = Field(
        default=None, ge=1, le=65535, description="KV bootstrap port (concurrent)"
    )
    kv_events: str | None = Field(
        default=None, description="the ZMQ address a coordinator subscribes to for the engine's KV events"
    )
    kv_events_replay: str | None = Field(
        default=None, description="the ZMQ address of the engine's KV event replay socket"
    )

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"


class Instance(Message):
    id: str
    role: InstanceRole
    engine_id: str
    model_name: str
    endpoints: list[Endpoint] = Field(min_length=1)
    status: InstanceStatus = "active"


class InstanceEvent(Message):
    event: Literal["add", "del", "set"]
    instances: list[Instance]


class RefreshResult(Message):
    status: Literal["success"] = "success"
    event: Literal["add", "del", "set"]
    instance_count: int
    version: int = Field(description="the coordinator's instance-set version after applying the event")
