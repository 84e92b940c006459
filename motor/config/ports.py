"""Port assignment for local mode, where every component shares one host.

Instances are numbered in order prefill, decode, union (k = 0, 1, ...); instance k's node manager listens on
`node_manager_port + k` and its engine on `base_port + 2k` (OpenAI API) and `base_port + 2k + 1` (status).
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING

from motor.config.models import UserConfig
from motor.kv.pool import KvCachePoolConfig

if TYPE_CHECKING:
    from motor.config.topology import Role, RoleSpec


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
    node_manager_port: int
    engine_port: int
    engine_status_port: int


def instance_ports(roles: "dict[Role, RoleSpec]") -> list[InstancePorts]:
    result = []
    k = 0
    for spec in roles.values():
        nm = spec.node_manager
        for index in range(spec.instances):
            base = nm.endpoint_config.base_port + 2 * k
            result.append(
                InstancePorts(
                    name=f"{spec.role}-{index}",
                    role=spec.role,
                    index=index,
                    node_manager_port=nm.api_config.node_manager_port + k,
                    engine_port=base,
                    engine_status_port=base + 1,
                )
            )
            k += 1
    return result


def local_port_uses(
    user: UserConfig, roles: "dict[Role, RoleSpec]", pool: KvCachePoolConfig | None
) -> list[PortUse]:
    coordinator = user.motor_coordinator_config.api_config
    uses = [
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
        PortUse(
            "controller",
            "motor_controller_config.api_config.controller_api_port",
            user.motor_controller_config.api_config.controller_api_port,
        ),
    ]
    if pool is not None:
        uses.append(PortUse("KV pool master", "kv_cache_pool_config.port", pool.port))
        uses.append(PortUse("KV pool metrics", "kv_cache_pool_config.metrics_port", pool.metrics_port))
    nm_path = "motor_nodemanger_config.api_config.node_manager_port"
    base_path = "motor_nodemanger_config.endpoint_config.base_port"
    for ports in instance_ports(roles):
        uses.append(PortUse(f"node manager {ports.name}", nm_path, ports.node_manager_port))
        uses.append(PortUse(f"engine {ports.name}", base_path, ports.engine_port))
        uses.append(PortUse(f"engine {ports.name} status", base_path, ports.engine_status_port))
    return uses
