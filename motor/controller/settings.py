"""What the controller needs: its compiled spec, with the token read from the environment."""

import os
from collections.abc import Mapping
from dataclasses import dataclass

from motor.config.models import EtcdConfig
from motor.protocol.specs import ControllerSpec


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


def controller_settings(spec: ControllerSpec, environ: Mapping[str, str] = os.environ) -> ControllerSettings:
    token = spec.token.resolve(environ)
    if not token:
        raise SettingsError(
            f"{spec.token.env} is not set: node managers authenticate with this shared token; set the same value "
            "for the controller and every node manager (`motor deploy` generates one per run)"
        )
    return ControllerSettings(
        job_id=spec.job_id,
        host=spec.bind_host,
        port=spec.port,
        token=token,
        coordinator_urls=list(spec.coordinator_urls),
        heartbeat_timeout=spec.heartbeat_timeout,
        expired_timeout=spec.expired_timeout,
        check_interval=spec.check_interval,
        reconcile_interval=spec.reconcile_interval,
        etcd=spec.etcd,
        log_level=spec.log_level,
    )
