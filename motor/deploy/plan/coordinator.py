"""The coordinator (`kind="coordinator"`), or its standby pair: the resolved dispatch profile, the roles that
make it ready, the served model names, and its two ports (inference, management)."""

from typing import Any

from motor.config.compat import engine_option
from motor.config.kv_events import DEFAULT_HASH_ALGORITHM, KV_EVENTS_ROLES, kv_events_enabled
from motor.config.models import CoordinatorConfig, EtcdEndpointConfig
from motor.config.ports import coordinator_probe_port
from motor.config.topology import Role, RoleSpec, Topology
from motor.deploy.plan.context import PlanContext
from motor.deploy.plan.model import ALL_INTERFACES, COORDINATOR, Component, probes
from motor.deploy.plan.standby import standby_spec, with_standby
from motor.kv.connectors import DispatchProfile
from motor.kv.levels import connector_levels
from motor.protocol import env as env_names
from motor.protocol.specs import CoordinatorSpec, EtcdSpec, KvIndexSpec, PoolTierSpec, SecretRef, url_scheme


def compile_coordinator(context: PlanContext) -> tuple[Component, ...]:
    topology = context.topology
    coordinator = topology.user.motor_coordinator_config
    api = coordinator.api_config
    base = context.base_spec(COORDINATOR, coordinator.logging_config.log_level)
    if context.kubernetes:
        # The Service and probes reach the pod IP and `kubectl port-forward` reaches loopback: listen on both.
        base["bind_host"] = ALL_INTERFACES
    env = context.env(
        topology.env.motor_common_env,
        topology.env.motor_coordinator_env,
        context.component_run_dir(COORDINATOR),
    )
    api_keys = coordinator.api_key_config.valid_keys
    if api_keys:
        env[env_names.API_KEYS] = "\n".join(api_keys)
    profile = topology.profile.profile
    component = Component(
        name=COORDINATOR,
        kind="coordinator",
        argv=context.motor_argv(COORDINATOR, "coordinator"),
        env=env,
        ports={"infer": api.coordinator_api_infer_port, "mgmt": api.coordinator_api_mgmt_port},
        probes=probes("mgmt", scheme=url_scheme(context.coordinator_tls)),
        spec=CoordinatorSpec(
            **base,  # type: ignore[arg-type]
            config=coordinator_without_secrets(coordinator),
            profile=profile,
            required_roles=required_roles(profile, set(topology.roles)),
            served_models=served_model_names(topology),
            engine_types=sorted({spec.engine_type for spec in topology.roles.values()}),
            infer_port=api.coordinator_api_infer_port,
            mgmt_port=api.coordinator_api_mgmt_port,
            controller_token=context.token,
            api_keys=SecretRef(env=env_names.API_KEYS) if coordinator.api_key_config.enable_api_key else None,
            infer_tls=context.infer_tls,
            mgmt_tls=context.coordinator_tls,
            kv_index=kv_index_spec(topology, context.store_config),
        ),
    )
    standby = standby_spec(
        coordinator.standby_config,
        _lock_etcd_spec(coordinator.etcd_config),
        f"/motor/{context.job_id}/{COORDINATOR}",
        coordinator_probe_port(topology.user),
    )
    return with_standby(context, component, standby)


# the simulator's block size (vLLM engines set theirs under kv_cache_affinity: motor.config.kv_routing)
DEFAULT_BLOCK_SIZE = 16


MOONCAKE_STORE_CONNECTOR = "MooncakeStoreConnector"
# the pool's answer costs each coordinator worker a store client; it contributes no memory to the pool
POOL_CLIENT_CONFIG = {"global_segment_size": 0, "local_buffer_size": 0}


def kv_index_spec(topology: Topology, store_config: dict[str, Any] | None) -> KvIndexSpec | None:
    """How the role that publishes KV events (prefill or union: a topology has one of them) hashes its blocks,
    and where the coordinator loads its tokenizer (vLLM's `tokenizer` option when set, else its model)."""
    if not kv_events_enabled(topology.user):
        return None
    publishers = [spec for role, spec in topology.roles.items() if role in KV_EVENTS_ROLES]
    if not publishers:
        return None
    spec = publishers[0]
    config = spec.engine_config
    model = engine_option(config, "tokenizer") or engine_option(config, "model")
    return KvIndexSpec(
        block_size=int(engine_option(config, "block_size") or DEFAULT_BLOCK_SIZE),
        hash_algorithm=str(engine_option(config, "prefix_caching_hash_algo") or DEFAULT_HASH_ALGORITHM),
        hash_seed=spec.env.get("PYTHONHASHSEED"),
        engine_type=spec.engine_type,
        model_path=str(model) if model is not None and spec.engine_type != "sim" else None,
        pool=None if store_config is None else pool_tier_spec(spec, store_config),
    )


def pool_tier_spec(spec: RoleSpec, store_config: dict[str, Any]) -> PoolTierSpec | None:
    """The keys the role's engines write to the pool, when motor knows them: the simulator's with a pool, vLLM's
    MooncakeStoreConnector's; None for other writers (the pool is then not asked)."""
    config = spec.engine_config
    client_config = {**store_config, **POOL_CLIENT_CONFIG}
    if spec.engine_type == "sim":
        served = engine_option(config, "served_model_name") or engine_option(config, "model") or "motor-sim"
        return PoolTierSpec(
            store_config=client_config,
            key_scheme="motor-sim",
            model=str(served[0] if isinstance(served, list) else served),
            kv_bytes_per_token=int(engine_option(config, "kv_bytes_per_token") or 1024),
        )
    transfer = engine_option(config, "kv_transfer_config")
    model = engine_option(config, "model")
    if not isinstance(transfer, dict) or model is None:
        return None
    names = {level.get("kv_connector") for _, level in connector_levels(transfer)}
    if MOONCAKE_STORE_CONNECTOR not in names:
        return None
    return PoolTierSpec(
        store_config=client_config,
        key_scheme="vllm-mooncake-store",
        model=str(model),
        key_tp_ranks=int(engine_option(config, "tensor_parallel_size") or 1),
    )


def _lock_etcd_spec(etcd: EtcdEndpointConfig) -> EtcdSpec:
    """The etcd of the coordinator's standby lock: plain gRPC (the coordinator has no etcd TLS setting), with
    credentials when MOTOR_ETCD_USERNAME / MOTOR_ETCD_PASSWORD are in its environment."""
    return EtcdSpec(
        host=etcd.etcd_host,
        port=etcd.etcd_port,
        timeout=etcd.etcd_timeout,
        username=SecretRef(env=env_names.ETCD_USERNAME),
        password=SecretRef(env=env_names.ETCD_PASSWORD),
    )


def coordinator_without_secrets(config: CoordinatorConfig) -> CoordinatorConfig:
    """The coordinator section as its spec carries it: no API keys (the spec names MOTOR_API_KEYS instead) and
    no TLS sections (the spec's own infer_tls / mgmt_tls replace them)."""
    return config.model_copy(
        update={
            "api_key_config": config.api_key_config.model_copy(update={"valid_keys": []}),
            "infer_tls_config": None,
            "mgmt_tls_config": None,
        }
    )


def required_roles(profile: DispatchProfile, configured: set[Role]) -> list[Role]:
    """The roles whose active instances make the coordinator ready for its profile (an EPD topology's encode
    instances too, as pyMotor's service waits for E, P and D)."""
    if profile != DispatchProfile.AGGREGATED:
        return ["prefill", "decode", "encode"] if "encode" in configured else ["prefill", "decode"]
    return ["union"] if "union" in configured or not configured else ["prefill"]


def served_model_names(topology: Topology) -> list[str]:
    """Names clients may ask for: each role's `served_model_name` (str or list), else its `model`."""
    names: list[str] = []
    for spec in topology.roles.values():
        names.extend(_served_names(spec))
    return list(dict.fromkeys(names))


def _served_names(spec: RoleSpec) -> list[str]:
    served = spec.engine_config.get("served_model_name") or spec.engine_config.get("model")
    values = served if isinstance(served, list) else [served]
    return [str(value) for value in values if value]
