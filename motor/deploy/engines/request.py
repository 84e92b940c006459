"""What an engine type builds a command from: one `EngineLaunchRequest` per engine instance."""

import sys
from dataclasses import dataclass
from typing import Any

from motor.config.topology import RoleSpec
from motor.deploy.engines.kv_events import KvEventsPlacement


@dataclass(frozen=True)
class EngineLaunchRequest:
    """Everything that decides how one engine instance starts, besides its role's engine section."""

    role_spec: RoleSpec  # the role's engine section: engine_type, engine_config (the engine's options), env
    instance_id: str  # e.g. "prefill-0"; also the transfer connector's engine_id
    host: str  # where the engine listens and what it advertises
    port: int
    status_port: int  # where `motor.engine.server` serves GET /status
    run_dir: str  # the engine's log, pid and store config files
    store_config: dict[str, Any] | None = None  # the KV pool's store config (None without a pool)
    python: str = sys.executable
    # Producers that serve a KV bootstrap endpoint (vLLM's MooncakeConnector, SGLang's prefill) serve it here;
    # None: on the configured port (the transfer connector's kv_port, SGLang's disaggregation-bootstrap-port),
    # which suits one producer per host.
    bootstrap_port: int | None = None
    store_lookup_ordinal: int = 0  # the instance's position on a shared host, added to store lookup ids
    kv_events: KvEventsPlacement | None = None  # where the engine publishes its KV events (None: it does not)
    otlp_traces_endpoint: str = ""  # the coordinator's tracer_config.endpoint: the engine exports there too


class LaunchError(ValueError):
    """The engine section cannot be turned into a command line."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message
