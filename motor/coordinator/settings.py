"""What the coordinator needs from the topology and the environment, resolved once at start."""

import os
from collections.abc import Mapping
from dataclasses import dataclass

from motor.config import Topology
from motor.config.models import CoordinatorConfig
from motor.kv.connectors import DispatchProfile

ADVERTISE_HOST_VAR = "MOTOR_ADVERTISE_HOST"
RUN_DIR_VAR = "MOTOR_RUN_DIR"
CONTROLLER_TOKEN_VAR = "MOTOR_CONTROLLER_TOKEN"
ALL_INTERFACES = "0.0.0.0"


@dataclass(frozen=True)
class CoordinatorSettings:
    config: CoordinatorConfig
    profile: DispatchProfile
    advertise_host: str
    bind_host: str
    infer_port: int
    mgmt_port: int
    served_models: tuple[str, ...]
    run_dir: str | None
    controller_token: str | None  # when set, POST /instances/refresh requires it as a bearer token
    engine_types: tuple[str, ...] = ()  # of the configured roles, for GET /version

    @classmethod
    def from_topology(
        cls, topology: Topology, environ: Mapping[str, str] = os.environ
    ) -> "CoordinatorSettings":
        config = topology.user.motor_coordinator_config
        api = config.api_config
        advertise = environ.get(ADVERTISE_HOST_VAR) or api.coordinator_api_host
        # Locally every component shares the loopback; in a pod the Service and probes reach the pod IP, and
        # `kubectl port-forward` reaches loopback, so listen everywhere there.
        local = topology.user.motor_deploy_config.deploy_mode == "local"
        return cls(
            config=config,
            profile=topology.profile.profile,
            advertise_host=advertise,
            bind_host=advertise if local else ALL_INTERFACES,
            infer_port=api.coordinator_api_infer_port,
            mgmt_port=api.coordinator_api_mgmt_port,
            served_models=served_model_names(topology),
            run_dir=environ.get(RUN_DIR_VAR) or None,
            controller_token=environ.get(CONTROLLER_TOKEN_VAR) or None,
            engine_types=tuple(sorted({spec.engine_type for spec in topology.roles.values()})),
        )


def served_model_names(topology: Topology) -> tuple[str, ...]:
    """Names clients may ask for: each role's `served_model_name` (str or list), else its `model`."""
    names: list[str] = []
    for spec in topology.roles.values():
        served = spec.engine_config.get("served_model_name") or spec.engine_config.get("model")
        values = served if isinstance(served, list) else [served]
        names.extend(str(value) for value in values if value)
    return tuple(dict.fromkeys(names))
