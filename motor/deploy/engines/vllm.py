"""vLLM (`engine_type: vllm`): its OpenAI API server with the instance's kv_transfer_config filled in.

motor injects into the transfer config `engine_id` = the instance id and, for store connectors, their lookup
socket id (configured + the instance's ordinal, so engines on one host do not share it). A producer whose
transfer connector serves a KV bootstrap endpoint is told its port through the variable the connector names.
"""

import copy
import json
from typing import Any

from motor.config.transfer import transfer_config_key
from motor.deploy.engines.command import engine_argv, engine_options, store_config_file, under_status_server
from motor.deploy.engines.kv_events import with_kv_events
from motor.deploy.engines.registry import EngineType
from motor.deploy.engines.request import EngineLaunchRequest, LaunchError
from motor.kv.connectors import ConnectorSpec
from motor.kv.connectors import lookup as lookup_connector
from motor.kv.levels import connector_levels, transfer_kv_port, transfer_level
from motor.kv.store_ids import with_store_lookup_ids
from motor.protocol import env as env_names
from motor.protocol.specs import EngineSpec

VLLM_MODULE = "vllm.entrypoints.openai.api_server"
PRODUCER_ROLES = frozenset({"kv_producer", "kv_both"})


def launch(request: EngineLaunchRequest) -> EngineSpec:
    options, transfer = vllm_options(request, VLLM)
    env = dict(request.role_spec.env)
    files = store_config_file(request, env)
    # Keeps the connectors' transfer engines and side channels on the advertised address.
    env.setdefault(env_names.VLLM_HOST_IP, request.host)
    served_bootstrap = None
    if transfer is not None:
        bootstrap = bootstrap_server(transfer)
        if bootstrap is not None and bootstrap.bootstrap_port_env is not None:
            served_bootstrap = request.bootstrap_port or _kv_port(transfer, request.role_spec.section_path)
            env[bootstrap.bootstrap_port_env] = str(served_bootstrap)
    argv = engine_argv(request, VLLM_MODULE, options)
    return under_status_server(request, argv, env, files, served_bootstrap)


def vllm_options(
    request: EngineLaunchRequest, engine: EngineType
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """vLLM's options (the simulator takes them too) with the instance's kv_transfer_config filled in (and
    `otlp-traces-endpoint` when the coordinator traces, unless the section sets its own), and the transfer
    config as configured (None without one)."""
    spec = request.role_spec
    options = engine_options(request, engine)
    transfer = transfer_config(spec.engine_config)
    if transfer is not None:
        try:
            filled = with_store_lookup_ids(
                with_engine_id(transfer, request.instance_id), request.store_lookup_ordinal
            )
        except ValueError as exc:
            key = transfer_config_key(spec.engine_config)
            raise LaunchError(f"{spec.section_path}.engine_config.{key}", str(exc)) from None
        options["kv-transfer-config"] = filled
    if request.kv_events is not None:
        options = with_kv_events(options, request.kv_events)
    if request.otlp_traces_endpoint and "otlp-traces-endpoint" not in options:
        options["otlp-traces-endpoint"] = request.otlp_traces_endpoint
    return options, transfer


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
    spec = lookup_connector(str(transfer.get("kv_connector")))
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


VLLM = EngineType("vllm", model_option="model", launch=launch)
