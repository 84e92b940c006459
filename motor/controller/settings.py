"""What the controller needs: its compiled spec, with the token read from the environment."""

import os
from collections.abc import Mapping
from dataclasses import dataclass

from motor.protocol.specs import ControllerSpec, EtcdSpec, RegistrationPolicy, TlsFiles


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
    registration: RegistrationPolicy
    etcd: EtcdSpec | None
    log_level: str
    mgmt_tls: TlsFiles | None = None
    etcd_username: str = ""
    etcd_password: str = ""


def controller_settings(spec: ControllerSpec, environ: Mapping[str, str] = os.environ) -> ControllerSettings:
    token = spec.token.resolve(environ)
    if not token:
        raise SettingsError(
            f"{spec.token.env} is not set: the controller checks node managers' instance credentials (derived from "
            "this token) and pushes to coordinators with it; give the controller and the coordinators the same "
            "value (`motor deploy` generates one per run)"
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
        registration=spec.registration,
        etcd=spec.etcd,
        log_level=spec.log_level,
        mgmt_tls=spec.mgmt_tls,
        **_etcd_credentials(spec.etcd, environ),
    )


def _etcd_credentials(etcd: EtcdSpec | None, environ: Mapping[str, str]) -> dict[str, str]:
    if etcd is None:
        return {}
    username, password = etcd.username.resolve(environ), etcd.password.resolve(environ)
    if username and not password:
        raise SettingsError(
            f"{etcd.username.env} is set but {etcd.password.env} is not: etcd authentication needs both"
        )
    return {"etcd_username": username, "etcd_password": password}
