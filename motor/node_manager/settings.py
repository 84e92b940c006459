"""What a node manager needs: its compiled spec, with its instance credential read from the environment, and
the engine's environment (motor.node_manager.engine_env)."""

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from motor.node_manager.engine_env import engine_environment
from motor.node_manager.engine_process import EngineCommand
from motor.protocol.instances import Endpoint, InstanceRole
from motor.protocol.specs import NodeManagerSpec, TlsFiles, url_scheme


class SettingsError(ValueError):
    pass


@dataclass(frozen=True)
class NodeSettings:
    instance_id: str
    role: InstanceRole
    model_name: str
    host: str
    port: int
    endpoint: Endpoint
    controller_url: str
    credential: str  # its instance's (motor.protocol.credentials), never the controller token
    heartbeat_interval: float
    engine: EngineCommand
    log_level: str
    mgmt_tls: TlsFiles | None = None

    @property
    def url(self) -> str:
        return f"{url_scheme(self.mgmt_tls)}://{self.host}:{self.port}"

    @property
    def engine_status_url(self) -> str:
        return f"http://{self.host}:{self.endpoint.status_port}/status"


def node_settings(spec: NodeManagerSpec, environ: Mapping[str, str] = os.environ) -> NodeSettings:
    credential = spec.credential.resolve(environ)
    if not credential:
        raise SettingsError(
            f"{spec.credential.env} is not set: the node manager authenticates to the controller with the "
            f"credential of instance {spec.instance_id}, which `motor deploy` derives from the controller token "
            "(motor.protocol.credentials.instance_credential)"
        )
    engine = spec.engine
    credentials = {ref.env: environ[ref.env] for ref in engine.secret_env if ref.env in environ}
    host = spec.advertise_host
    return NodeSettings(
        instance_id=spec.instance_id,
        role=spec.role,
        model_name=spec.model_name,
        host=host,
        port=spec.port,
        endpoint=Endpoint(
            host=host,
            port=engine.port,
            status_port=engine.status_port,
            bootstrap_port=engine.bootstrap_port,
            kv_events=engine.kv_events,
            kv_events_replay=engine.kv_events_replay,
        ),
        controller_url=spec.controller_url.rstrip("/"),
        credential=credential,
        heartbeat_interval=spec.heartbeat_interval,
        engine=EngineCommand(
            list(engine.argv),
            engine_environment(environ, engine.env, credentials),
            dict(engine.files),
            Path(engine.log_path),
            Path(engine.pid_path),
        ),
        log_level=spec.log_level,
        mgmt_tls=spec.mgmt_tls,
    )
