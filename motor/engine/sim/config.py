"""The simulator's settings, as parsed from its command line."""

from dataclasses import dataclass, field, replace
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from motor.config.transfer import KvRole
from motor.engine.sim.capacity import CapacityModel
from motor.engine.sim.faults import Faults
from motor.engine.sim.latency import LatencyModel
from motor.kv.block_hashes import DEFAULT_ALGORITHM, DEFAULT_SEED
from motor.protocol.engine import SIM_OWNED_BY

OWNED_BY = SIM_OWNED_BY


class KvEventsConfig(BaseModel):
    """vLLM 0.32's KVEventsConfig fields; anything else is refused, as vLLM refuses it. `max_queue_size` is
    accepted and has no effect: the simulator sends each batch when it is made, without vLLM's queue."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enable_kv_cache_events: bool = False
    publisher: Literal["null", "zmq"] | None = None
    endpoint: str = "tcp://*:5557"
    replay_endpoint: str | None = None
    buffer_steps: int = Field(default=10_000, ge=1)
    hwm: int = Field(default=100_000, ge=0)
    max_queue_size: int = Field(default=100_000, ge=1)
    topic: str = ""

    @property
    def publishes(self) -> bool:
        publisher = self.publisher or ("zmq" if self.enable_kv_cache_events else "null")
        return self.enable_kv_cache_events and publisher == "zmq"

    def for_engine(self, index: int) -> "KvEventsConfig":
        """The endpoints of virtual engine `index` (vLLM's data-parallel offset for tcp; a suffix for ipc)."""
        if index == 0:
            return self
        return self.model_copy(
            update={
                "endpoint": _offset(self.endpoint, index),
                "replay_endpoint": None
                if self.replay_endpoint is None
                else _offset(self.replay_endpoint, index),
            }
        )


def _offset(endpoint: str, index: int) -> str:
    if endpoint.startswith("tcp://"):
        base, _, port = endpoint.rpartition(":")
        return endpoint if port == "0" else f"{base}:{int(port) + index}"
    return f"{endpoint}_dp{index}"


EcRole = Literal["ec_producer", "ec_consumer"]


class EcStorageConfig(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    shared_storage_path: str = Field(min_length=1)


class EcTransferConfig(BaseModel):
    """vLLM's ECTransferConfig shape. Every connector is simulated as ECExampleConnector: encoder outputs handed
    over as files under `shared_storage_path`; the keys the simulator does not read pass through."""

    model_config = ConfigDict(extra="allow", frozen=True)

    ec_connector: str
    ec_role: EcRole
    # validated when left out too, so the error names the missing shared_storage_path
    ec_connector_extra_config: EcStorageConfig = Field(default_factory=dict, validate_default=True)


@dataclass(frozen=True)
class SimConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    model: str = "motor-sim"
    served_model_names: tuple[str, ...] = ("motor-sim",)
    kv_role: KvRole = "kv_both"
    kv_connector: str | None = None
    engine_id: str = ""  # empty: named after the address once the port is bound
    block_size: int = 16
    max_model_len: int = 8192
    seed: int = 0
    latency: LatencyModel = field(default_factory=LatencyModel)
    capacity: CapacityModel = field(default_factory=CapacityModel)
    max_batch: int = 256
    kv_bytes_per_token: int = 1024
    kv_wait_timeout_s: float = 30.0
    num_kv_blocks: int = 4096
    enable_prefix_caching: bool = True
    store_config_path: str | None = None
    faults: Faults = field(default_factory=Faults)
    log_level: str = "info"
    otlp_traces_endpoint: str = ""  # "": no traces
    virtual_engines: int = 1
    engine_index: int = 0  # which of the process's virtual engines this is (its metrics' `engine` label)
    kv_events: KvEventsConfig | None = None  # None or not publishing: no KV events
    prefix_caching_hash_algo: str = DEFAULT_ALGORITHM
    hash_seed: str = DEFAULT_SEED  # vLLM's: the engine's PYTHONHASHSEED when set
    ec_transfer: EcTransferConfig | None = None  # None: multimodal items are encoded locally

    def bound_to(self, port: int) -> "SimConfig":
        """The config of the engine listening on `port` (the one the kernel chose for --port 0)."""
        return replace(self, port=port, engine_id=self.engine_id or f"sim-{self.host}-{port}")

    def virtual_engine(self, index: int, port: int) -> "SimConfig":
        """The config of virtual engine `index` on `port`: its engine id is `<--engine-id>-<index>`, or named
        after its address when no id was given."""
        engine_id = f"{self.engine_id}-{index}" if self.engine_id else f"sim-{self.host}-{port}"
        kv_events = None if self.kv_events is None else self.kv_events.for_engine(index)
        return replace(self, port=port, engine_id=engine_id, engine_index=index, kv_events=kv_events)

    @property
    def model_name(self) -> str:
        """The first served name: responses carry it, and it namespaces the engine's pool keys."""
        return self.served_model_names[0]

    @property
    def writes_pool(self) -> bool:
        return self.kv_role != "kv_consumer"

    @property
    def block_bytes(self) -> int:
        return self.block_size * self.kv_bytes_per_token
