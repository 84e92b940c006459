"""The engine roles of a topology and what is resolved per role: read by the topology's validation and by the
local port assignment."""

from dataclasses import dataclass
from typing import Any, Literal

from motor.config.compat import NODE_MANAGER_KEY
from motor.config.models import NodeManagerConfig

Role = Literal["prefill", "decode", "union", "encode"]
# The kv_role of each role's transfer connector.
ROLE_KV = {"prefill": "kv_producer", "decode": "kv_consumer", "union": "kv_both"}


@dataclass(frozen=True)
class RoleSpec:
    role: Role
    section_path: str
    instances: int
    pods_per_instance: int
    accelerators_per_pod: int
    engine_type: str
    engine_config: dict[str, Any]
    env: dict[str, str]
    node_manager: NodeManagerConfig
    node_manager_path: str = NODE_MANAGER_KEY  # where node_manager came from (an engine section may nest one)
