"""What a node manager needs: its instance, ports, the controller's address and token, the engine command."""

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from motor.config import Topology
from motor.config.ports import SHARED_HOST_MODES, instance_ports
from motor.engine.launch import (
    LaunchError,
    engine_launch,
    served_model_name,
)
from motor.kv.pool import engine_store_config
from motor.node_manager.engine_process import EngineCommand
from motor.protocol.instances import Endpoint, InstanceRole
from motor.protocol.node_manager import ENGINE_PID_FILE

TOKEN_VAR = "MOTOR_CONTROLLER_TOKEN"
CONTROLLER_VAR = "MOTOR_CONTROLLER_URL"
ADVERTISE_HOST_VAR = "MOTOR_ADVERTISE_HOST"
POOL_MASTER_VAR = "MOTOR_POOL_MASTER"
RUN_DIR_VAR = "MOTOR_RUN_DIR"
DEFAULT_HOST = "127.0.0.1"
# Modes where every instance shares one host and therefore gets shifted ports (motor/config/ports.py).


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
    token: str
    heartbeat_interval: float
    engine: EngineCommand
    log_level: str

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def engine_status_url(self) -> str:
        return f"http://{self.host}:{self.endpoint.status_port}/status"


def node_settings(
    topology: Topology, role: str, index: int, environ: Mapping[str, str] = os.environ
) -> NodeSettings:
    spec = topology.roles.get(role)  # type: ignore[call-overload]
    if spec is None:
        raise SettingsError(
            f"--role {role}: this topology has no {role} engines (roles: {', '.join(topology.roles)})"
        )
    if not 0 <= index < spec.instances:
        raise SettingsError(
            f"--index {index}: {role} has {spec.instances} instance(s), use 0..{spec.instances - 1}"
        )
    token = environ.get(TOKEN_VAR, "")
    if not token:
        raise SettingsError(
            f"{TOKEN_VAR} is not set: the node manager authenticates to the controller with this shared token; "
            "give it the controller's value (`motor deploy` generates one per run)"
        )
    instance_id = f"{role}-{index}"
    user = topology.user
    nm = spec.node_manager
    bootstrap_port = None
    ordinal = 0
    if user.motor_deploy_config.deploy_mode in SHARED_HOST_MODES:
        ports = next(p for p in instance_ports(topology.roles) if p.name == instance_id)
        port, engine_port, status_port = ports.node_manager_port, ports.engine_port, ports.engine_status_port
        bootstrap_port = ports.kv_bootstrap_port
        ordinal = ports.ordinal
    else:
        port, engine_port = nm.api_config.node_manager_port, nm.endpoint_config.base_port
        status_port = engine_port + 1
    host = environ.get(ADVERTISE_HOST_VAR) or DEFAULT_HOST
    controller_api = user.motor_controller_config.api_config
    controller_url = environ.get(CONTROLLER_VAR) or (
        f"http://{controller_api.controller_api_host}:{controller_api.controller_api_port}"
    )
    run_dir = Path(environ.get(RUN_DIR_VAR) or Path.cwd() / f"motor-run-{instance_id}")
    store_config = None
    if topology.pool is not None:
        store_config = engine_store_config(topology.pool, master_host=host)
        if environ.get(POOL_MASTER_VAR):
            store_config["master_server_address"] = environ[POOL_MASTER_VAR]
    try:
        launch = engine_launch(
            spec,
            instance_id=instance_id,
            host=host,
            port=engine_port,
            status_port=status_port,
            store_config=store_config,
            run_dir=run_dir,
            bootstrap_port=bootstrap_port,
            store_lookup_ordinal=ordinal,
        )
        model_name = served_model_name(spec)
    except LaunchError as exc:
        raise SettingsError(str(exc)) from exc
    return NodeSettings(
        instance_id=instance_id,
        role=spec.role,
        model_name=model_name,
        host=host,
        port=port,
        endpoint=Endpoint(
            host=host, port=engine_port, status_port=status_port, bootstrap_port=launch.bootstrap_port
        ),
        controller_url=controller_url.rstrip("/"),
        token=token,
        heartbeat_interval=nm.basic_config.heartbeat_interval_seconds,
        engine=EngineCommand(
            launch.argv, launch.env, launch.files, run_dir / "engine.log", run_dir / ENGINE_PID_FILE
        ),
        log_level=nm.logging_config.log_level,
    )
