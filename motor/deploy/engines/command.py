"""The steps every engine type shares: its options with what motor owns injected (host, port, the served model
name), the KV pool's store config file, and the engine command under `python -m motor.engine.server`, which
starts the engine as its child process and serves `GET /status` on the status port."""

import json
from pathlib import PurePosixPath
from typing import Any

from motor.config.topology import RoleSpec
from motor.deploy.engines.options import normalised_options, option_flags
from motor.deploy.engines.registry import EngineType, lookup
from motor.deploy.engines.request import EngineLaunchRequest, LaunchError
from motor.protocol import env as env_names
from motor.protocol.node_manager import ENGINE_PID_FILE
from motor.protocol.specs import EngineSpec

SERVER_MODULE = "motor.engine.server"
ENGINE_LOG_FILE = "engine.log"


def engine_options(request: EngineLaunchRequest, engine: EngineType) -> dict[str, Any]:
    """The role's engine options keyed by flag name, with the instance's host, port and served model name."""
    spec = request.role_spec
    options = normalised_options(spec.engine_config)
    if engine.needs_model and not options.get(engine.model_option):
        raise LaunchError(
            f"{spec.section_path}.engine_config.{engine.model_option}",
            f"required for a {engine.name} engine: a model directory (e.g. the one `motor model tiny DIR` "
            "writes)",
        )
    options["host"] = request.host
    options["port"] = request.port
    options["served-model-name"] = options.get("served-model-name") or served_model_name(spec)
    return options


def served_model_name(spec: RoleSpec) -> str:
    """The name clients use: served_model_name (the first of a list), else the model path."""
    options = normalised_options(spec.engine_config)
    name = options.get("served-model-name")
    if isinstance(name, list | tuple):
        name = name[0] if name else None
    if name:
        return str(name)
    engine = lookup(spec.engine_type)
    model = options.get(engine.model_option if engine is not None else "model")
    if model:
        return str(model)
    raise LaunchError(
        f"{spec.section_path}.engine_config.served_model_name", "required when engine_config.model is not set"
    )


def store_config_file(request: EngineLaunchRequest, env: dict[str, str]) -> dict[str, str]:
    """The files that hand the engine the KV pool's store config (none without a pool); `env` gets the
    variable naming it."""
    if request.store_config is None:
        return {}
    path = str(PurePosixPath(request.run_dir) / f"{request.instance_id}.mooncake.json")
    env[env_names.STORE_CONFIG_PATH] = path
    return {path: json.dumps(request.store_config, indent=2) + "\n"}


def engine_argv(request: EngineLaunchRequest, module: str, options: dict[str, Any]) -> list[str]:
    """`python -m <module>` with the options as flags."""
    where = f"{request.role_spec.section_path}.engine_config"
    return [request.python, "-m", module, *option_flags(options, where)]


def under_status_server(
    request: EngineLaunchRequest,
    argv: list[str],
    env: dict[str, str],
    files: dict[str, str],
    bootstrap_port: int | None,
) -> EngineSpec:
    """The engine command `argv` under `python -m motor.engine.server`, which serves its status port;
    `bootstrap_port` is the KV bootstrap endpoint the engine serves, if any."""
    wrapper = [
        request.python,
        "-m",
        SERVER_MODULE,
        "--engine-host",
        request.host,
        "--engine-port",
        str(request.port),
        "--status-host",
        request.host,
        "--status-port",
        str(request.status_port),
        "--",
    ]
    directory = PurePosixPath(request.run_dir)
    return EngineSpec(
        engine_type=request.role_spec.engine_type,
        argv=[*wrapper, *argv],
        env=env,
        files=files,
        port=request.port,
        status_port=request.status_port,
        bootstrap_port=bootstrap_port,
        kv_events=request.kv_events.connect if request.kv_events else None,
        kv_events_replay=request.kv_events.replay_connect if request.kv_events else None,
        log_path=str(directory / ENGINE_LOG_FILE),
        pid_path=str(directory / ENGINE_PID_FILE),
    )
