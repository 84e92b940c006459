"""A copy of an example's user_config.json whose motor components listen on a block of free loopback ports."""

import copy
from typing import Any


def with_ports(user: dict[str, Any], base: int) -> dict[str, Any]:
    """`user` with the coordinator, controller and node managers on 127.0.0.1 from `base` on (32 ports:
    API base, management +1, controller +2, node managers +4, engines from +12)."""
    user = copy.deepcopy(user)
    user["motor_coordinator_config"]["api_config"] = {
        "coordinator_api_host": "127.0.0.1",
        "coordinator_api_infer_port": base,
        "coordinator_api_mgmt_port": base + 1,
    }
    user["motor_controller_config"]["api_config"] = {
        "controller_api_host": "127.0.0.1",
        "controller_api_port": base + 2,
    }
    user["motor_nodemanger_config"]["api_config"] = {"node_manager_port": base + 4}
    user["motor_nodemanger_config"]["endpoint_config"] = {"base_port": base + 12}
    return user
