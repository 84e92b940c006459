"""Port assignment for local mode, where every component shares one host.

Instances are numbered in order prefill, decode, union (k = 0, 1, ...); instance k's node manager listens on
`node_manager_port + k` and its engine on `base_port + 2k` (OpenAI API) and `base_port + 2k + 1` (status).
A producer whose transfer connector serves a KV bootstrap endpoint (vLLM's MooncakeConnector) uses the
connector's `kv_port + i` for the i-th instance of its role. Store connectors' host-local lookup sockets get the
configured id + k (see `motor.kv.store_ids`).

A running local job that is scaled keeps the ordinals of the instances it keeps (`kept`), so their ports do not
move; the new instances take the smallest ordinals no kept instance holds.
"""

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from motor.config.compat import engine_option
from motor.config.models import UserConfig
from motor.config.planner import instance_accelerators, planner_bounds
from motor.config.roles import Role, RoleSpec
from motor.config.transfer import transfer_config_key
from motor.kv.connectors import serves_bootstrap
from motor.kv.levels import transfer_kv_port, transfer_level
from motor.kv.pool import KvCachePoolConfig

# Deploy modes whose engines share one host (and so its ports and IPC paths).
SHARED_HOST_MODES = ("local", "single_container")


@dataclass(frozen=True)
class PortUse:
    component: str
    path: str
    port: int


@dataclass(frozen=True)
class InstancePorts:
    name: str
    role: str
    index: int
    ordinal: int  # k: the instance's position in the plan, unique on a shared host
    node_manager_port: int
    engine_port: int
    engine_status_port: int
    kv_bootstrap_port: int | None = None


def instance_ports(roles: dict[Role, RoleSpec], kept: Mapping[str, int] | None = None) -> list[InstancePorts]:
    """Every instance's ports, in order prefill, decode, union; `kept` maps instance names to the ordinals they
    keep (names of instances the roles no longer have are ignored)."""
    names = [f"{spec.role}-{index}" for spec in roles.values() for index in range(spec.instances)]
    held = {name: k for name, k in (kept or {}).items() if name in names}
    if len(set(held.values())) != len(held):
        raise ValueError(f"kept ordinals {held} give two instances the same ordinal")
    free = (k for k in range(len(names) + len(held)) if k not in held.values())
    ordinals = {name: held[name] if name in held else next(free) for name in names}
    result = []
    for spec in roles.values():
        nm = spec.node_manager
        bootstrap_base = kv_bootstrap_base(spec)
        for index in range(spec.instances):
            k = ordinals[f"{spec.role}-{index}"]
            base = nm.endpoint_config.base_port + 2 * k
            result.append(
                InstancePorts(
                    name=f"{spec.role}-{index}",
                    role=spec.role,
                    index=index,
                    ordinal=k,
                    node_manager_port=nm.api_config.node_manager_port + k,
                    engine_port=base,
                    engine_status_port=base + 1,
                    kv_bootstrap_port=None if bootstrap_base is None else bootstrap_base + index,
                )
            )
    return result


PRODUCER_ROLES = ("prefill", "union")


SGLANG_DEFAULT_BOOTSTRAP_PORT = 8998


def kv_bootstrap_base(spec: RoleSpec) -> int | None:
    """Where a producer serves its KV bootstrap endpoint: SGLang's prefill on `disaggregation_bootstrap_port`
    (8998), a vLLM producer on its transfer connector's kv_port when that connector serves one."""
    if spec.engine_type == "sglang":
        if spec.role != "prefill":
            return None
        configured = engine_option(spec.engine_config, "disaggregation_bootstrap_port")
        try:
            return SGLANG_DEFAULT_BOOTSTRAP_PORT if configured is None else int(configured)
        except (TypeError, ValueError):
            return None
    key = transfer_config_key(spec.engine_config)
    config = spec.engine_config.get(key) if key else None
    if spec.role not in PRODUCER_ROLES or not isinstance(config, dict):
        return None
    if not serves_bootstrap(str(transfer_level(config)[1].get("kv_connector"))):
        return None
    return transfer_kv_port(config)


# Default standby probe port: the component's first port + this (the controller's API port, the coordinator's
# inference port); locally the second process of the pair uses the next port.
PROBE_PORT_OFFSET = 1000


def controller_probe_port(user: UserConfig) -> int:
    controller = user.motor_controller_config
    return (
        controller.standby_config.probe_port or controller.api_config.controller_api_port + PROBE_PORT_OFFSET
    )


def coordinator_probe_port(user: UserConfig) -> int:
    coordinator = user.motor_coordinator_config
    return (
        coordinator.standby_config.probe_port
        or coordinator.api_config.coordinator_api_infer_port + PROBE_PORT_OFFSET
    )


def standby_probe_port_uses(user: UserConfig) -> list[PortUse]:
    """On one host the two processes of a standby pair answer their probes on probe_port and probe_port + 1."""
    uses = []
    for section, first in (
        ("motor_controller_config", controller_probe_port(user)),
        ("motor_coordinator_config", coordinator_probe_port(user)),
    ):
        if getattr(user, section).standby_config.enable_master_standby:
            name = section.removeprefix("motor_").removesuffix("_config")
            path = f"{section}.standby_config.probe_port"
            uses.append(PortUse(f"{name} probes", path, first))
            uses.append(PortUse(f"{name} standby probes (probe_port + 1)", path, first + 1))
    return uses


def coordinator_port_uses(user: UserConfig) -> list[PortUse]:
    coordinator = user.motor_coordinator_config.api_config
    return [
        PortUse(
            "coordinator (OpenAI API)",
            "motor_coordinator_config.api_config.coordinator_api_infer_port",
            coordinator.coordinator_api_infer_port,
        ),
        PortUse(
            "coordinator (management)",
            "motor_coordinator_config.api_config.coordinator_api_mgmt_port",
            coordinator.coordinator_api_mgmt_port,
        ),
    ]


def collisions(uses: list[PortUse]) -> list[tuple[PortUse, PortUse]]:
    """(use, the earlier use of the same port) for every port used more than once."""
    seen: dict[int, PortUse] = {}
    return [(use, seen[use.port]) for use in uses if seen.setdefault(use.port, use) is not use]


def pod_port_uses(
    user: UserConfig, roles: dict[Role, RoleSpec], pool: KvCachePoolConfig | None
) -> dict[str, list[PortUse]]:
    """The ports each pod of a multi-pod deployment listens on, by pod (one entry per engine role)."""
    pods = {"coordinator": coordinator_port_uses(user)}
    if pool is not None:
        pods["KV pool master"] = [
            PortUse("KV pool master", "kv_cache_pool_config.port", pool.port),
            PortUse("KV pool metrics", "kv_cache_pool_config.metrics_port", pool.metrics_port),
        ]
    for spec in roles.values():
        nm = spec.node_manager
        base = nm.endpoint_config.base_port
        uses = [
            PortUse(
                "node manager",
                f"{spec.node_manager_path}.api_config.node_manager_port",
                nm.api_config.node_manager_port,
            ),
            PortUse("engine", f"{spec.node_manager_path}.endpoint_config.base_port", base),
            PortUse(
                "engine status (base_port + 1)",
                f"{spec.node_manager_path}.endpoint_config.base_port",
                base + 1,
            ),
        ]
        bootstrap = kv_bootstrap_base(spec)
        if bootstrap is not None:
            uses.append(PortUse("KV bootstrap", "kv_transfer_config transfer connector kv_port", bootstrap))
        pods[f"{spec.role} engine"] = uses
    return pods


def planner_port_uses(user: UserConfig) -> list[PortUse]:
    planner = user.motor_planner_config
    if not planner.enable:
        return []
    return [
        PortUse(
            "planner", "motor_planner_config.api_config.planner_api_port", planner.api_config.planner_api_port
        )
    ]


def with_planner_maxima(user: UserConfig, roles: dict[Role, RoleSpec]) -> dict[Role, RoleSpec]:
    """The roles whose ports are those a job the planner scales may use (the roles as they are when it is off):
    the most prefill instances it may run (bootstrap ports go by index), and decode instances up to the most
    instances in all. A scaled job's ordinals stay below its largest instance count, whatever the split."""
    planner = user.motor_planner_config
    if not planner.enable or (planner.max_instances is None and planner.max_accelerators is None):
        return roles
    if "prefill" not in roles or "decode" not in roles:
        return roles
    bounds = planner_bounds(planner, instance_accelerators(user))
    most = bounds.maximum["prefill"] + bounds.maximum["decode"]
    if bounds.max_instances is not None:
        most = min(most, bounds.max_instances)
    prefill = bounds.maximum["prefill"]  # its bootstrap ports go by index: the highest index it may reach
    decode = most - prefill  # ordinals: whatever the split, a job's ordinals stay below `most`
    return {
        **roles,
        "prefill": dataclasses.replace(roles["prefill"], instances=prefill),
        "decode": dataclasses.replace(roles["decode"], instances=decode),
    }


def local_port_uses(
    user: UserConfig, roles: dict[Role, RoleSpec], pool: KvCachePoolConfig | None
) -> list[PortUse]:
    """Every port of a job on one host; with the planner on, of the most instances it may run."""
    uses = [
        *coordinator_port_uses(user),
        PortUse(
            "controller",
            "motor_controller_config.api_config.controller_api_port",
            user.motor_controller_config.api_config.controller_api_port,
        ),
        *standby_probe_port_uses(user),
        *planner_port_uses(user),
    ]
    if pool is not None:
        uses.append(PortUse("KV pool master", "kv_cache_pool_config.port", pool.port))
        uses.append(PortUse("KV pool metrics", "kv_cache_pool_config.metrics_port", pool.metrics_port))
    for ports in instance_ports(with_planner_maxima(user, roles)):
        nm_path = roles[ports.role].node_manager_path  # type: ignore[index]
        uses.append(
            PortUse(
                f"node manager {ports.name}",
                f"{nm_path}.api_config.node_manager_port",
                ports.node_manager_port,
            )
        )
        uses.append(
            PortUse(f"engine {ports.name}", f"{nm_path}.endpoint_config.base_port", ports.engine_port)
        )
        uses.append(
            PortUse(
                f"engine {ports.name} status",
                f"{nm_path}.endpoint_config.base_port",
                ports.engine_status_port,
            )
        )
        if ports.kv_bootstrap_port is not None:
            uses.append(
                PortUse(
                    f"KV bootstrap {ports.name}",
                    "kv_transfer_config transfer connector kv_port",
                    ports.kv_bootstrap_port,
                )
            )
    return uses
