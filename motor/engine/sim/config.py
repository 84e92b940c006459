"""The simulator's settings, as parsed from its command line."""

from dataclasses import dataclass, field, replace

from motor.config.transfer import KvRole
from motor.engine.sim.capacity import CapacityModel
from motor.engine.sim.faults import Faults
from motor.engine.sim.latency import LatencyModel
from motor.protocol.engine import SIM_OWNED_BY

OWNED_BY = SIM_OWNED_BY


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
    virtual_engines: int = 1
    engine_index: int = 0  # which of the process's virtual engines this is (its metrics' `engine` label)

    def bound_to(self, port: int) -> "SimConfig":
        """The config of the engine listening on `port` (the one the kernel chose for --port 0)."""
        return replace(self, port=port, engine_id=self.engine_id or f"sim-{self.host}-{port}")

    def virtual_engine(self, index: int, port: int) -> "SimConfig":
        """The config of virtual engine `index` on `port`: its engine id is `<--engine-id>-<index>`, or named
        after its address when no id was given."""
        engine_id = f"{self.engine_id}-{index}" if self.engine_id else f"sim-{self.host}-{port}"
        return replace(self, port=port, engine_id=engine_id, engine_index=index)

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
