"""Whole-topology validation: roles, connectors, dispatch profile, pool, timeouts, ports, deploy targets.

Rules add to the caller's issue list (the loader reports everything at once); a rule that reads a value the
schema already refused is skipped (`broken` holds those paths).
"""

from dataclasses import dataclass, field
from typing import Any, Literal

from motor.config.compat import NODE_MANAGER_KEY
from motor.config.encoder import ENCODE_SECTION, check_encode_connectors, encode_section
from motor.config.errors import ConfigIssue
from motor.config.hardware import HARDWARE
from motor.config.kv_routing import check_kv_routing
from motor.config.models import (
    KUBERNETES_MODES,
    LEGACY_DEPLOY_MODE_PROFILE,
    EngineSection,
    EnvConfig,
    UserConfig,
)
from motor.config.planner import check_planner
from motor.config.ports import (
    SHARED_HOST_MODES,
    PortUse,
    collisions,
    instance_ports,
    local_port_uses,
    pod_port_uses,
)
from motor.config.roles import ROLE_KV, Role, RoleSpec
from motor.config.tls import TlsSettings, resolve_tls
from motor.config.transfer import (
    apply_role,
    check_engine_compatibility,
    check_pd_agreement,
    read_transfer_config,
    transfer_config_key,
)
from motor.kv.connectors import needs_pool_master
from motor.kv.levels import connector_levels
from motor.kv.pool import KvCachePoolConfig
from motor.kv.profile import ProfileError, ProfileResolution, resolve_profile
from motor.kv.store_ids import store_lookup_ids

# Transfer timeouts engines take from the environment, with the factor that turns their unit into milliseconds.
TRANSFER_TIMEOUT_VARS = {
    "ASCEND_CONNECT_TIMEOUT": ("ms", 1.0),
    "ASCEND_TRANSFER_TIMEOUT": ("ms", 1.0),
    "VLLM_MOONCAKE_CONNECTOR_TIMEOUT": ("s", 1000.0),
}
HASH_SEED_VAR = "PYTHONHASHSEED"
DEFAULT_HASH_SEED = "0"


Target = Literal["local", "kubernetes"]


@dataclass(frozen=True)
class TargetFit:
    """Whether a deploy target can run the topology, and if not, why (each reason names its path)."""

    target: Target
    reasons: tuple[ConfigIssue, ...] = ()

    @property
    def fits(self) -> bool:
        return not self.reasons

    def describe(self) -> str:
        if self.fits:
            return f"{self.target}: yes"
        return f"{self.target}: no ({'; '.join(reason.message for reason in self.reasons)})"


@dataclass(frozen=True)
class Topology:
    user: UserConfig
    env: EnvConfig
    roles: dict[Role, RoleSpec]
    profile: ProfileResolution
    pool: KvCachePoolConfig | None
    ports: list[PortUse]
    warnings: list[str] = field(default_factory=list)
    targets: tuple[TargetFit, ...] = ()
    tls: TlsSettings = field(default_factory=TlsSettings)

    def fit(self, target: Target) -> TargetFit:
        return next(fit for fit in self.targets if fit.target == target)


def build_topology(
    user: UserConfig,
    env: EnvConfig,
    warnings: list[str],
    issues: list[ConfigIssue],
    broken: frozenset[str] = frozenset(),
) -> Topology | None:
    """The topology, or None when a rule failed (its problems are in `issues`)."""
    before = len(issues)
    deploy = user.motor_deploy_config
    aggregated = deploy.hybrid_instances_num is not None or user.motor_engine_union_config is not None
    sections = _role_sections(user, aggregated, issues)
    encode = encode_section(user, aggregated, issues, warnings)
    if encode is not None and not aggregated:
        sections["encode"] = (ENCODE_SECTION, encode)

    transfer: dict[Role, tuple[dict[str, Any] | None, str]] = {}
    for role, (path, section) in sections.items():
        if role == "encode":  # no KV: check_encode_connectors refuses a kv_transfer_config there
            transfer[role] = (None, f"{path}.engine_config.kv_transfer_config")
        else:
            transfer[role] = read_transfer_config(section.engine_config, path, issues)

    engine_configs: dict[Role, dict[str, Any]] = {}
    for role, (_, section) in sections.items():
        config, config_path = transfer[role]
        engine_config = dict(section.engine_config)
        if config is not None:
            key = transfer_config_key(engine_config) or "kv_transfer_config"
            engine_config[key] = apply_role(config, config_path, ROLE_KV[role], warnings)
        engine_configs[role] = engine_config
    one_host = deploy.deploy_mode in SHARED_HOST_MODES
    for role, (key, ec_config) in check_encode_connectors(sections, one_host, issues, warnings).items():
        engine_configs[role][key] = ec_config

    if not aggregated and "prefill" in sections and "decode" in sections:
        (p_cfg, p_path), (d_cfg, d_path) = transfer["prefill"], transfer["decode"]
        if (p_cfg is None) != (d_cfg is None) and len(issues) == before:
            missing = d_path if d_cfg is None else p_path
            issues.append(ConfigIssue(missing, "prefill and decode must both configure kv_transfer_config"))
        if p_cfg is not None and d_cfg is not None:
            check_pd_agreement(p_cfg, p_path, d_cfg, d_path, issues)
        check_engine_compatibility(
            sections["prefill"][1].engine_config,
            sections["prefill"][0],
            sections["decode"][1].engine_config,
            sections["decode"][0],
            issues,
        )
        if sections["prefill"][1].engine_type != sections["decode"][1].engine_type:
            issues.append(
                ConfigIssue(
                    "motor_engine_decode_config.engine_type",
                    f"{sections['decode'][1].engine_type!r} differs from the prefill side's "
                    f"{sections['prefill'][1].engine_type!r}; P and D must run the same engine",
                )
            )

    if user.kv_conductor_config is not None and user.kv_conductor_config.model_fields_set:
        warnings.append(
            "kv_conductor_config: pyMotor setting not implemented by motor; motor deploys no KV conductor, "
            "under scheduler_type kv_cache_affinity each coordinator worker indexes the engines' KV events itself"
        )
    if deploy.deploy_mode == "infer_service_set":
        warnings.append(
            "motor_deploy_config.deploy_mode: infer_service_set is rendered as motor's multi_deployment objects "
            "(a Deployment per component and engine instance, Services); the InferServiceSet custom resource "
            "itself belongs to MindCluster and is not created"
        )
    profile = _resolve(user, sections, transfer, aggregated, issues, warnings)
    pool_section = (
        "kv_cache_pool_config" if user.kv_cache_pool_config is not None else "kv_cache_store_config"
    )
    pool = _pool(user, transfer, pool_section, issues, warnings)
    check_kv_routing(user, sections, engine_configs, pool is not None, issues)
    engine_env = _engine_env(env, sections, pool, issues)
    if pool is not None:
        _check_lease(pool, pool_section, env, sections, issues)
        if "motor_deploy_config.hardware_type" not in broken:
            _check_protocol(pool, pool_section, user, issues)

    roles: dict[Role, RoleSpec] = {}
    for role, (path, section) in sections.items():
        count, pods, accelerators = _counts(user, role)
        own_node_manager = section.motor_nodemanger_config is not None
        roles[role] = RoleSpec(
            role=role,
            section_path=path,
            instances=count or 0,
            pods_per_instance=pods,
            accelerators_per_pod=accelerators,
            engine_type=section.engine_type,
            engine_config=engine_configs[role],
            env=engine_env.get(role, {}),
            node_manager=section.motor_nodemanger_config or user.motor_nodemanger_config,
            node_manager_path=f"{path}.{NODE_MANAGER_KEY}" if own_node_manager else NODE_MANAGER_KEY,
        )

    tls = resolve_tls(
        user,
        {role: (spec.node_manager_path, spec.node_manager.mgmt_tls_config) for role, spec in roles.items()},
        issues,
    )
    shared_host = deploy.deploy_mode in SHARED_HOST_MODES
    ports = local_port_uses(user, roles, pool) if shared_host else []
    targets = _check_targets(user, roles, pool, issues, broken)
    check_planner(user, aggregated, issues)
    _check_store_lookup_ids(roles, transfer, shared_host, issues)
    if len(issues) > before or profile is None:
        return None
    return Topology(user, env, roles, profile, pool, ports, warnings, targets, tls)


def _role_sections(
    user: UserConfig, aggregated: bool, issues: list[ConfigIssue]
) -> dict[Role, tuple[str, EngineSection]]:
    deploy = user.motor_deploy_config
    sections: dict[Role, tuple[str, EngineSection]] = {}
    if aggregated:
        for name in ("p_instances_num", "d_instances_num"):
            if getattr(deploy, name) is not None:
                issues.append(
                    ConfigIssue(
                        f"motor_deploy_config.{name}",
                        "not allowed with hybrid_instances_num (aggregated); remove it",
                    )
                )
        for name in ("motor_engine_prefill_config", "motor_engine_decode_config"):
            if getattr(user, name) is not None:
                issues.append(ConfigIssue(name, "not allowed in an aggregated (union) deployment; remove it"))
        if deploy.hybrid_instances_num is None:
            issues.append(
                ConfigIssue(
                    "motor_deploy_config.hybrid_instances_num",
                    "required with motor_engine_union_config (1..16)",
                )
            )
        if user.motor_engine_union_config is None:
            issues.append(
                ConfigIssue(
                    "motor_engine_union_config",
                    "required with hybrid_instances_num: describe the union engine",
                )
            )
        else:
            sections["union"] = ("motor_engine_union_config", user.motor_engine_union_config)
        return sections
    for role, count_key, section_key in (
        ("prefill", "p_instances_num", "motor_engine_prefill_config"),
        ("decode", "d_instances_num", "motor_engine_decode_config"),
    ):
        if getattr(deploy, count_key) is None:
            issues.append(
                ConfigIssue(
                    f"motor_deploy_config.{count_key}",
                    "required (1..16) for PD disaggregation; or set hybrid_instances_num with "
                    "motor_engine_union_config for aggregated serving",
                )
            )
        section = getattr(user, section_key)
        if section is None:
            issues.append(
                ConfigIssue(section_key, f"required: describe the {role} engine (engine_type, engine_config)")
            )
        else:
            sections[role] = (section_key, section)  # type: ignore[index]
    return sections


def _counts(user: UserConfig, role: Role) -> tuple[int | None, int, int]:
    deploy = user.motor_deploy_config
    if role == "prefill":
        return deploy.p_instances_num, deploy.single_p_instance_pod_num, deploy.p_pod_npu_num
    if role == "decode":
        return deploy.d_instances_num, deploy.single_d_instance_pod_num, deploy.d_pod_npu_num
    if role == "encode":
        return deploy.e_instances_num, deploy.single_e_instance_pod_num, deploy.e_pod_npu_num
    return deploy.hybrid_instances_num, deploy.single_hybrid_instance_pod_num, deploy.hybrid_pod_npu_num


def _resolve(
    user: UserConfig,
    sections: dict[Role, tuple[str, EngineSection]],
    transfer: dict[Role, tuple[dict[str, Any] | None, str]],
    aggregated: bool,
    issues: list[ConfigIssue],
    warnings: list[str],
) -> ProfileResolution | None:
    scheduler = user.motor_coordinator_config.scheduler_config
    deciding_role: Role = "union" if aggregated else "prefill"
    if deciding_role not in sections:
        return None
    config, path = transfer[deciding_role]
    if config is None and any(issue.path.startswith(path) for issue in issues):
        return None
    explicit, explicit_path = (
        scheduler.dispatch_profile,
        "motor_coordinator_config.scheduler_config.dispatch_profile",
    )
    section_path, section = sections[deciding_role]
    if explicit is None and section.dispatch_profile is not None:
        explicit, explicit_path = section.dispatch_profile, f"{section_path}.dispatch_profile"
    try:
        resolution = resolve_profile(
            engine_type=section.engine_type,
            transfer_config=config,
            transfer_config_path=path,
            explicit=explicit,
            explicit_path=explicit_path,
            aggregated_only=aggregated,
        )
    except ProfileError as exc:
        issues.append(ConfigIssue(exc.path, exc.message))
        return None
    warnings.extend(resolution.warnings)
    if scheduler.deploy_mode is not None:
        legacy = LEGACY_DEPLOY_MODE_PROFILE[scheduler.deploy_mode]
        if legacy != resolution.profile:
            warnings.append(
                f"motor_coordinator_config.scheduler_config.deploy_mode: {scheduler.deploy_mode!r} means "
                f"{legacy.value}, but motor dispatches {resolution.profile.value} ({resolution.decided_by}); "
                "deploy_mode is only checked, set dispatch_profile to override"
            )
    return resolution


def _pool(
    user: UserConfig,
    transfer: dict[Role, tuple[dict[str, Any] | None, str]],
    pool_section: str,
    issues: list[ConfigIssue],
    warnings: list[str],
) -> KvCachePoolConfig | None:
    """The pool config; a store connector writing to the Mooncake pool (on either side) needs one."""
    backend_paths = []
    for config, path in transfer.values():
        for suffix, level in connector_levels(config or {}):
            name = level.get("kv_connector")
            if not isinstance(name, str) or not needs_pool_master(name):
                continue
            backend_paths.append((f"{path}{suffix}.kv_connector", name))
            extra = level.get("kv_connector_extra_config")
            backend = extra.get("backend") if isinstance(extra, dict) else None
            if backend not in (None, "mooncake"):
                warnings.append(
                    f"{path}{suffix}.kv_connector_extra_config.backend: {backend!r}: motor's KV pool is a Mooncake "
                    "master; this store connector reaches it only with backend 'mooncake'"
                )
    pool = getattr(user, pool_section)
    if pool is not None:
        return pool
    if backend_paths:
        path, name = backend_paths[0]
        issues.append(
            ConfigIssue(
                path,
                f"{name} is a KV pool backend but kv_cache_pool_config is missing; add kv_cache_pool_config "
                '(e.g. {"protocol": "tcp"} on CPU; port 50088, lease 11000 ms and sizes default)',
            )
        )
    return None


def _engine_env(
    env: EnvConfig,
    sections: dict[Role, tuple[str, EngineSection]],
    pool: KvCachePoolConfig | None,
    issues: list[ConfigIssue],
) -> dict[Role, dict[str, str]]:
    effective: dict[Role, dict[str, str]] = {}
    for role in sections:
        role_env = _role_env(env, role)
        effective[role] = {**env.motor_common_env, **role_env}
    if pool is None:
        return effective
    seeds = {
        role: (values[HASH_SEED_VAR], _env_source(env, role, HASH_SEED_VAR))
        for role, values in effective.items()
        if HASH_SEED_VAR in values
    }
    if len({seed for seed, _ in seeds.values()}) > 1:
        described = ", ".join(f"{seed!r} in {source}" for seed, source in seeds.values())
        issues.append(
            ConfigIssue(
                f"env.json:{HASH_SEED_VAR}",
                f"engines disagree ({described}); with the KV pool on every engine must hash blocks alike: "
                "set one value in motor_common_env or remove it (motor then uses 0)",
            )
        )
    seed = next(iter(seeds.values()))[0] if seeds else DEFAULT_HASH_SEED
    for values in effective.values():
        values.setdefault(HASH_SEED_VAR, seed)
    return effective


def _role_env_section(env: EnvConfig, role: Role) -> str:
    if role == "prefill":
        return "motor_engine_prefill_env"
    if role == "decode":
        return "motor_engine_decode_env"
    if role == "encode":
        return "motor_engine_encode_env"
    return "motor_engine_union_env" if env.motor_engine_union_env is not None else "motor_engine_prefill_env"


def _role_env(env: EnvConfig, role: Role) -> dict[str, str]:
    return getattr(env, _role_env_section(env, role))


def _env_source(env: EnvConfig, role: Role, name: str) -> str:
    return _role_env_section(env, role) if name in _role_env(env, role) else "motor_common_env"


def _check_lease(
    pool: KvCachePoolConfig,
    pool_section: str,
    env: EnvConfig,
    sections: dict[Role, tuple[str, EngineSection]],
    issues: list[ConfigIssue],
) -> None:
    section_names = ["motor_common_env", *dict.fromkeys(_role_env_section(env, role) for role in sections)]
    for section_name in section_names:
        values: dict[str, str] = getattr(env, section_name)
        for var, (unit, to_ms) in TRANSFER_TIMEOUT_VARS.items():
            if var not in values:
                continue
            raw = values[var]
            try:
                timeout_ms = float(raw) * to_ms
            except ValueError:
                issues.append(
                    ConfigIssue(f"env.json:{section_name}.{var}", f"{raw!r} is not a number ({unit})")
                )
                continue
            if pool.default_kv_lease_ttl <= timeout_ms:
                issues.append(
                    ConfigIssue(
                        f"{pool_section}.default_kv_lease_ttl",
                        f"{pool.default_kv_lease_ttl} ms must exceed {var}={raw} {unit} from env.json {section_name}: "
                        "a KV object's lease must outlive the engines' transfer; raise the lease or lower the timeout",
                    )
                )


ACCELERATOR_PROTOCOLS = {"ascend", "rdma"}


def _check_protocol(
    pool: KvCachePoolConfig, pool_section: str, user: UserConfig, issues: list[ConfigIssue]
) -> None:
    hardware = user.motor_deploy_config.hardware_type
    if hardware == "cpu" and pool.protocol in ACCELERATOR_PROTOCOLS:
        issues.append(
            ConfigIssue(
                f"{pool_section}.protocol",
                f"{pool.protocol!r} needs accelerator/RDMA hardware but motor_deploy_config.hardware_type is 'cpu'; "
                'set "protocol": "tcp"',
            )
        )


POD_COUNT_KEYS = {
    "prefill": "single_p_instance_pod_num",
    "decode": "single_d_instance_pod_num",
    "union": "single_hybrid_instance_pod_num",
    "encode": "single_e_instance_pod_num",
}


def _check_targets(
    user: UserConfig,
    roles: dict[Role, RoleSpec],
    pool: KvCachePoolConfig | None,
    issues: list[ConfigIssue],
    broken: frozenset[str],
) -> tuple[TargetFit, ...]:
    """Which targets can run the topology. The rules of the deploy_mode given are errors; without deploy_mode
    (pyMotor's default, a Kubernetes deployment) they only say which target fits, and it is an error only when
    none does."""
    deploy = user.motor_deploy_config
    mode = deploy.deploy_mode
    shared_host = _one_host_problems(user, roles, pool)
    local = TargetFit("local", tuple(shared_host + _local_only_problems(user, roles, mode)))
    kubernetes = TargetFit("kubernetes", tuple(_kubernetes_problems(user)))
    if mode not in SHARED_HOST_MODES:
        issues.extend(_pod_port_problems(user, roles, pool))
    issues.extend(_standby_problems(user))
    if mode == "local":
        issues.extend(local.reasons)
    elif mode == "single_container":
        issues.extend(shared_host + list(kubernetes.reasons))
    elif mode in KUBERNETES_MODES:
        issues.extend(kubernetes.reasons)
    elif "motor_deploy_config.deploy_mode" not in broken and not local.fits and not kubernetes.fits:
        issues.append(
            ConfigIssue(
                "motor_deploy_config.deploy_mode",
                f"not set, and no target can run this topology: {local.describe()}; {kubernetes.describe()}; "
                "fix one of them or set deploy_mode",
            )
        )
    return local, kubernetes


def _standby_problems(user: UserConfig) -> list[ConfigIssue]:
    """A standby needs something to take over from: the controller's registry in etcd, and two processes."""
    problems = []
    controller = user.motor_controller_config
    if controller.standby_config.enable_master_standby and not controller.etcd_config.enable_etcd_persistence:
        problems.append(
            ConfigIssue(
                "motor_controller_config.standby_config.enable_master_standby",
                "a standby controller restores the instance set from etcd when it takes over: set "
                "motor_controller_config.etcd_config.enable_etcd_persistence to true (and etcd_host, etcd_port)",
            )
        )
    if user.motor_deploy_config.deploy_mode == "single_container":
        for section in ("motor_controller_config", "motor_coordinator_config"):
            if getattr(user, section).standby_config.enable_master_standby:
                problems.append(
                    ConfigIssue(
                        f"{section}.standby_config.enable_master_standby",
                        "single_container runs one pod, where a standby would die with its leader; use "
                        "multi_deployment (or local) for a standby, or set this to false",
                    )
                )
    return problems


def _one_host_problems(
    user: UserConfig, roles: dict[Role, RoleSpec], pool: KvCachePoolConfig | None
) -> list[ConfigIssue]:
    """Every process on one host (local, single_container): one pod per instance, no port used twice."""
    problems = []
    for spec in roles.values():
        if spec.pods_per_instance != 1:
            problems.append(
                ConfigIssue(
                    f"motor_deploy_config.{POD_COUNT_KEYS[spec.role]}",
                    f"{spec.role} instances need {spec.pods_per_instance} pods; on one host each instance is one "
                    "process group, so this needs 1 (or a multi-pod Kubernetes deploy_mode)",
                )
            )
    problems += [
        ConfigIssue(
            use.path,
            f"port {use.port} for {use.component} is already used by {other.component} ({other.path}); "
            "on one host every component needs its own port",
        )
        for use, other in collisions(local_port_uses(user, roles, pool))
    ]
    return problems


def _local_only_problems(
    user: UserConfig, roles: dict[Role, RoleSpec], mode: str | None
) -> list[ConfigIssue]:
    """Hardware motor's local mode cannot drive; an explicit local deploy_mode is taken at its word."""
    hardware = HARDWARE.get(user.motor_deploy_config.hardware_type)
    if mode == "local" or hardware is None or not hardware.cluster_only:
        return []
    return [
        ConfigIssue(
            "motor_deploy_config.hardware_type",
            f"{hardware.name} ({hardware.family}) accelerators are scheduled by Kubernetes; local mode runs "
            "engines on this machine",
        )
    ]


def _kubernetes_problems(user: UserConfig) -> list[ConfigIssue]:
    image = user.motor_deploy_config.image_name
    if image is not None and image.strip():
        return []
    return [
        ConfigIssue(
            "motor_deploy_config.image_name",
            f"{'empty' if image is not None else 'not set'}: Kubernetes pods need the container image holding "
            'motor and the engine, e.g. "image_name": "registry.example/motor:1.0"',
        )
    ]


def _pod_port_problems(
    user: UserConfig, roles: dict[Role, RoleSpec], pool: KvCachePoolConfig | None
) -> list[ConfigIssue]:
    """Within one pod every container port (and so every Service port) must differ."""
    return [
        ConfigIssue(
            use.path,
            f"port {use.port} for {use.component} is already used by {other.component} ({other.path}) in the "
            f"same {pod} pod; every container and Service port there must differ",
        )
        for pod, uses in pod_port_uses(user, roles, pool).items()
        for use, other in collisions(uses)
    ]


def _check_store_lookup_ids(
    roles: dict[Role, RoleSpec],
    transfer: dict[Role, tuple[dict[str, Any] | None, str]],
    shared_host: bool,
    issues: list[ConfigIssue],
) -> None:
    """Store connectors' lookup ids are integers and, on a shared host, differ between engines."""
    ordinals = {p.name: p.ordinal for p in instance_ports(roles)}
    seen: dict[tuple[str, int], str] = {}
    for role, spec in roles.items():
        config, config_path = transfer[role]
        for store in store_lookup_ids(config or {}):
            path = f"{config_path}{store.path}"
            if store.base is None:
                issues.append(
                    ConfigIssue(
                        path, f"{store.raw!r} is not a non-negative integer; {store.connector} needs one"
                    )
                )
                continue
            if not shared_host:
                continue
            for index in range(spec.instances):
                name = f"{spec.role}-{index}"
                lookup_id = store.base + ordinals[name]
                other = seen.setdefault((store.key, lookup_id), name)
                if other != name:
                    issues.append(
                        ConfigIssue(
                            path,
                            f"{name} would use {store.key} {lookup_id} (configured {store.base} + its ordinal "
                            f"{ordinals[name]}), the same as {other}; engines on one host must not share the "
                            "store connector's lookup socket: leave the id equal on every side (e.g. 0) or "
                            "space the sides by the instance count",
                        )
                    )
