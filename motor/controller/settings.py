"""What the controller needs from the config files and the environment."""

import os
from collections.abc import Mapping
from dataclasses import dataclass

from motor.config import Topology
from motor.config.models import EtcdConfig

TOKEN_VAR = "MOTOR_CONTROLLER_TOKEN"
COORDINATORS_VAR = "MOTOR_COORDINATOR_MGMT_URL"
ADVERTISE_HOST_VAR = "MOTOR_ADVERTISE_HOST"


class SettingsError(ValueError):
    pass


@dataclass(frozen=True)
class ControllerSettings:
    job_id: str
    host: str
    port: int
    token: str
    coordinator_urls: list[str]
    heartbeat_timeout: float
    expired_timeout: float
    check_interval: float
    reconcile_interval: float
    etcd: EtcdConfig | None
    log_level: str


def controller_settings(topology: Topology, environ: Mapping[str, str] = os.environ) -> ControllerSettings:
    user = topology.user
    config = user.motor_controller_config
    token = environ.get(TOKEN_VAR, "")
    if not token:
        raise SettingsError(
            f"{TOKEN_VAR} is not set: node managers authenticate with this shared token; set the same value "
            "for the controller and every node manager (`motor deploy` generates one per run)"
        )
    coordinator = user.motor_coordinator_config.api_config
    default_url = f"http://{coordinator.coordinator_api_host}:{coordinator.coordinator_api_mgmt_port}"
    urls = [u.strip() for u in environ.get(COORDINATORS_VAR, default_url).split(",") if u.strip()]
    instance = config.instance_config
    return ControllerSettings(
        job_id=user.motor_deploy_config.job_id,
        host=environ.get(ADVERTISE_HOST_VAR) or config.api_config.controller_api_host,
        port=config.api_config.controller_api_port,
        token=token,
        coordinator_urls=urls,
        heartbeat_timeout=instance.instance_heartbeat_timeout,
        expired_timeout=instance.instance_expired_timeout,
        check_interval=instance.instance_manager_check_interval,
        reconcile_interval=config.event_config.coordinator_heartbeat_interval,
        etcd=config.etcd_config if config.etcd_config.enable_etcd_persistence else None,
        log_level=config.logging_config.log_level,
    )
