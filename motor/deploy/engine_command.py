"""The engine command of an instance: its role's engine section plus what the topology decides → an EngineSpec.

The engine section's `engine_config` holds the engine's own CLI options. They become flags the way vLLM's
argument parser expects them: keys normalised to dashes, `true` → bare flag, `false` and `null` → omitted,
an object → one JSON string, a list → the flag followed by every value. motor then injects what it owns:
host and port, the served model name, `engine_id` = the instance id (the transfer connector's), store connectors'
lookup socket id (configured + the instance's ordinal, so engines on one host do not share it), and the KV pool
store config (a JSON file named by `MOONCAKE_CONFIG_PATH`).

Every engine runs under `python -m motor.engine.server`, which starts the engine as its child process and
serves `GET /status` on the status port. Pure: the node manager only runs what this returns.
"""

import copy
import json
import sys
from pathlib import PurePosixPath
from typing import Any

from motor.config.topology import RoleSpec
from motor.config.transfer import transfer_config_key
from motor.kv.connectors import ConnectorSpec, lookup
from motor.kv.levels import connector_levels, transfer_kv_port, transfer_level
from motor.kv.store_ids import with_store_lookup_ids
from motor.protocol import env as env_names
from motor.protocol.node_manager import ENGINE_PID_FILE
from motor.protocol.specs import EngineSpec

VLLM_MODULE = "vllm.entrypoints.openai.api_server"
SIM_MODULE = "motor.engine.sim"
SGLANG_MODULE = "sglang.launch_server"
ENGINE_MODULES = {"vllm": VLLM_MODULE, "sim": SIM_MODULE, "sglang": SGLANG_MODULE}
# The option naming the model weights: vLLM and the simulator take `--model`, SGLang `--model-path`.
MODEL_OPTIONS = {"vllm": "model", "sim": "model", "sglang": "model-path"}
SGLANG_DEFAULT_BOOTSTRAP_PORT = 8998
SGLANG_HOST_IP = "SGLANG_HOST_IP"
SERVER_MODULE = "motor.engine.server"
ENGINE_LOG_FILE = "engine.log"
PRODUCER_ROLES = frozenset({"kv_producer", "kv_both"})


class LaunchError(ValueError):
    """The engine section cannot be turned into a command line."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


def engine_spec(
    spec: RoleSpec,
    *,
    instance_id: str,
    host: str,
    port: int,
    status_port: int,
    store_config: dict[str, Any] | None,
    run_dir: str,
    python: str = sys.executable,
    bootstrap_port: int | None = None,
    store_lookup_ordinal: int = 0,
) -> EngineSpec:
    """The command, environment and files that start instance `instance_id` of `spec.role` in `run_dir`.

    `bootstrap_port` is for producers that serve a KV bootstrap endpoint (vLLM's MooncakeConnector, SGLang's
    prefill); without it the configured port is used (the transfer connector's `kv_port`, SGLang's
    `disaggregation-bootstrap-port`), which suits one producer per host. `store_lookup_ordinal` (the instance's
    position on a shared host) is added to store connectors' lookup id.
    """
    module = ENGINE_MODULES.get(spec.engine_type)
    if module is None:
        raise LaunchError(
            f"{spec.section_path}.engine_type",
            f"unknown engine type {spec.engine_type!r}; use one of {', '.join(ENGINE_MODULES)}",
        )
    options = normalised_options(spec.engine_config)
    model_option = MODEL_OPTIONS[spec.engine_type]
    if spec.engine_type != "sim" and not options.get(model_option):
        raise LaunchError(
            f"{spec.section_path}.engine_config.{model_option}",
            f"required for a {spec.engine_type} engine: a model directory (e.g. the one `motor model tiny DIR` "
            "writes)",
        )
    options["host"] = host
    options["port"] = port
    options["served-model-name"] = options.get("served-model-name") or served_model_name(spec)
    if spec.engine_type == "sglang":
        return _sglang_spec(
            spec, options, host=host, port=port, status_port=status_port, run_dir=run_dir, python=python,
            bootstrap_port=bootstrap_port,
        )  # fmt: skip
    transfer = transfer_config(spec.engine_config)
    if transfer is not None:
        try:
            filled = with_store_lookup_ids(with_engine_id(transfer, instance_id), store_lookup_ordinal)
        except ValueError as exc:
            key = transfer_config_key(spec.engine_config)
            raise LaunchError(f"{spec.section_path}.engine_config.{key}", str(exc)) from None
        options["kv-transfer-config"] = filled

    env = dict(spec.env)
    files: dict[str, str] = {}
    directory = PurePosixPath(run_dir)
    if store_config is not None:
        path = directory / f"{instance_id}.mooncake.json"
        files[str(path)] = json.dumps(store_config, indent=2) + "\n"
        env[env_names.STORE_CONFIG_PATH] = str(path)
    served_bootstrap = None
    if spec.engine_type == "vllm":
        # Keeps the connectors' transfer engines and side channels on the advertised address.
        env.setdefault(env_names.VLLM_HOST_IP, host)
        bootstrap = None if transfer is None else bootstrap_server(transfer)
        if bootstrap is not None and bootstrap.bootstrap_port_env is not None:
            served_bootstrap = bootstrap_port or _kv_port(transfer, spec.section_path)  # type: ignore[arg-type]
            env[bootstrap.bootstrap_port_env] = str(served_bootstrap)

    engine_argv = [python, "-m", module, *option_flags(options, f"{spec.section_path}.engine_config")]
    return _wrapped(spec, engine_argv, env, files, host, port, status_port, run_dir, python, served_bootstrap)


def _sglang_spec(
    spec: RoleSpec,
    options: dict[str, Any],
    *,
    host: str,
    port: int,
    status_port: int,
    run_dir: str,
    python: str,
    bootstrap_port: int | None,
) -> EngineSpec:
    """SGLang pairs P and D through the prefill's bootstrap server (host, port, room in each request): the
    prefill serves it on `disaggregation-bootstrap-port`, and the role picks the disaggregation mode."""
    key = transfer_config_key(spec.engine_config)
    if key is not None:
        raise LaunchError(
            f"{spec.section_path}.engine_config.{key}",
            "SGLang takes no kv_transfer_config (a vLLM option); its P/D transfer is set with the "
            "disaggregation-* options (e.g. disaggregation-transfer-backend)",
        )
    env = dict(spec.env)
    env.setdefault(SGLANG_HOST_IP, host)
    served_bootstrap = None
    if spec.role == "union":
        options.pop("disaggregation-mode", None)
    else:
        options["disaggregation-mode"] = spec.role
    if spec.role == "prefill":
        configured = options.get("disaggregation-bootstrap-port", SGLANG_DEFAULT_BOOTSTRAP_PORT)
        served_bootstrap = bootstrap_port or int(configured)
        options["disaggregation-bootstrap-port"] = served_bootstrap
    engine_argv = [python, "-m", SGLANG_MODULE, *option_flags(options, f"{spec.section_path}.engine_config")]
    return _wrapped(spec, engine_argv, env, {}, host, port, status_port, run_dir, python, served_bootstrap)


def _wrapped(
    spec: RoleSpec,
    engine_argv: list[str],
    env: dict[str, str],
    files: dict[str, str],
    host: str,
    port: int,
    status_port: int,
    run_dir: str,
    python: str,
    bootstrap_port: int | None,
) -> EngineSpec:
    """The engine command under `python -m motor.engine.server`, which serves its status port."""
    wrapper = [
        python,
        "-m",
        SERVER_MODULE,
        "--engine-host",
        host,
        "--engine-port",
        str(port),
        "--status-host",
        host,
        "--status-port",
        str(status_port),
        "--",
    ]
    directory = PurePosixPath(run_dir)
    return EngineSpec(
        engine_type=spec.engine_type,
        argv=[*wrapper, *engine_argv],
        env=env,
        files=files,
        port=port,
        status_port=status_port,
        bootstrap_port=bootstrap_port,
        log_path=str(directory / ENGINE_LOG_FILE),
        pid_path=str(directory / ENGINE_PID_FILE),
    )


def normalised_options(engine_config: dict[str, Any]) -> dict[str, Any]:
    """engine_config keyed by flag name (dashes), later keys winning when two spellings name one flag."""
    return {option_name(key): value for key, value in engine_config.items()}


def option_name(key: str) -> str:
    return key.strip().lstrip("-").replace("_", "-")


def option_flags(options: dict[str, Any], where: str = "engine_config") -> list[str]:
    """Render options as CLI flags: true → bare flag, false/None/[] → omitted, dict → JSON, list → values.
    `where` is the options' config path, for errors."""
    argv: list[str] = []
    for name, value in options.items():
        flag = f"--{option_name(name)}"
        path = f"{where}.{name}"
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, dict):
            argv += [flag, json.dumps(value, separators=(",", ":"))]
        elif isinstance(value, list | tuple):
            if value:
                argv += [flag, *(_scalar(item, path) for item in value)]
        else:
            argv += [flag, _scalar(value, path)]
    return argv


def _scalar(value: Any, path: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value)
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    raise LaunchError(path, f"cannot pass a {type(value).__name__} on the command line")


def served_model_name(spec: RoleSpec) -> str:
    """The name clients use: served_model_name (the first of a list), else the model path."""
    options = normalised_options(spec.engine_config)
    name = options.get("served-model-name")
    if isinstance(name, list | tuple):
        name = name[0] if name else None
    if name:
        return str(name)
    model = options.get(MODEL_OPTIONS.get(spec.engine_type, "model"))
    if model:
        return str(model)
    raise LaunchError(
        f"{spec.section_path}.engine_config.served_model_name", "required when engine_config.model is not set"
    )


def transfer_config(engine_config: dict[str, Any]) -> dict[str, Any] | None:
    key = transfer_config_key(engine_config)
    if key is None:
        return None
    raw = engine_config[key]
    return json.loads(raw) if isinstance(raw, str) else raw


def bootstrap_server(config: dict[str, Any]) -> ConnectorSpec | None:
    """The transfer connector's spec when, on a producer, it serves a KV bootstrap endpoint."""
    _, transfer = transfer_level(config)
    role = transfer.get("kv_role") or config.get("kv_role")
    spec = lookup(str(transfer.get("kv_connector")))
    return spec if spec is not None and spec.serves_bootstrap and role in PRODUCER_ROLES else None


def _kv_port(config: dict[str, Any], section_path: str) -> int:
    port = transfer_kv_port(config)
    if port is None:
        suffix, transfer = transfer_level(config)
        raise LaunchError(
            f"{section_path}.engine_config.kv_transfer_config{suffix}.kv_port",
            f"{transfer.get('kv_connector')} on a producer serves a KV bootstrap endpoint and needs a port: set "
            f"kv_port (1..65535) on the transfer connector (got {transfer.get('kv_port')!r})",
        )
    return port


def with_engine_id(config: dict[str, Any], engine_id: str) -> dict[str, Any]:
    """Copy of a kv_transfer_config naming `engine_id` on its top level.

    MultiConnector hands the top-level engine_id to every sub-connector, so the transfer connector gets it too;
    an engine_id inside a sub-connector is removed, because vLLM (0.32) fails to start with one.
    """
    filled = copy.deepcopy(config)
    filled["engine_id"] = engine_id
    for _, sub in connector_levels(filled)[1:]:
        sub.pop("engine_id", None)
    return filled
