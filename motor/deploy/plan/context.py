"""What every compiler of the plan reads: the validated topology and what `build_plan` resolves from it once
(target, directories, instance ports, TLS, the URLs components reach each other at, the engines' store config)."""

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from motor.config.ports import InstancePorts, instance_ports
from motor.config.tls import CONTROLLER as TLS_CONTROLLER
from motor.config.tls import COORDINATOR as TLS_COORDINATOR
from motor.config.tls import TlsSetting
from motor.config.topology import Topology
from motor.deploy.plan.model import (
    ALL_INTERFACES,
    CONTROLLER,
    COORDINATOR_MGMT,
    KUBERNETES_CONFIG_DIR,
    KUBERNETES_RUN_DIR,
    KV_POOL,
    LOCAL_HOST,
    POD_IP_REF,
    ComponentKind,
    Target,
    service_host,
)
from motor.kv.pool import engine_store_config
from motor.protocol import env as env_names
from motor.protocol.specs import HOST_PLACEHOLDER, SecretRef, TlsFiles, spec_file_name, url_scheme


@dataclass(frozen=True)
class PlanContext:
    """Read by every compiler, changed by none."""

    topology: Topology
    target: Target
    job_id: str
    config_dir: str  # where the components read their spec files
    run_dir: str  # each component's MOTOR_RUN_DIR is <run_dir>/<component name>
    python: str  # argv[0] of the motor entry points
    shared_pod: bool  # every component on one host: locally, or deploy_mode single_container
    instances: tuple[InstancePorts, ...]  # every engine instance with its ports, in start order
    token: SecretRef  # the controller token, by reference
    controller_tls: TlsFiles | None
    coordinator_tls: TlsFiles | None
    infer_tls: TlsFiles | None
    controller_url: str  # where the node managers reach the controller
    coordinator_mgmt_url: str  # where the controller reaches the coordinator's management port
    store_config: dict[str, Any] | None  # the engines' KV pool store config (None without a pool)

    @property
    def kubernetes(self) -> bool:
        return self.target == "kubernetes"

    @property
    def advertise_host(self) -> str:
        """MOTOR_ADVERTISE_HOST in a component's environment."""
        return LOCAL_HOST if self.target == "local" else POD_IP_REF

    @property
    def spec_host(self) -> str:
        """A component's own address as its spec says it."""
        return LOCAL_HOST if self.target == "local" else HOST_PLACEHOLDER

    @property
    def bind_host(self) -> str:
        return LOCAL_HOST if self.target == "local" else ALL_INTERFACES

    def component_run_dir(self, name: str) -> str:
        return str(PurePosixPath(self.run_dir) / name)

    def env(self, base: Mapping[str, str], section: Mapping[str, str], run_dir: str) -> dict[str, str]:
        """A component's environment: env.json's sections, then where it advertises itself and runs."""
        return {**base, **section, env_names.ADVERTISE_HOST: self.advertise_host, env_names.RUN_DIR: run_dir}

    def base_spec(self, name: str, log_level: str) -> dict[str, object]:
        """The fields every motor component's spec starts with."""
        return {
            "name": name,
            "job_id": self.job_id,
            "log_level": log_level,
            "advertise_host": self.spec_host,
            "bind_host": self.spec_host,
            "run_dir": self.component_run_dir(name),
        }

    def motor_argv(self, name: str, kind: ComponentKind) -> tuple[str, ...]:
        """`python -m motor.<kind> --spec <config_dir>/<name>.spec.json`"""
        spec_path = PurePosixPath(self.config_dir) / spec_file_name(name)
        return (self.python, "-m", f"motor.{kind}", "--spec", str(spec_path))


def plan_context(
    topology: Topology,
    *,
    target: Target | None,
    config_dir: str | None,
    run_dir: str | None,
    python: str | None,
    kept_ordinals: Mapping[str, int] | None,
) -> PlanContext:
    """Resolve `build_plan`'s arguments and what every compiler derives from the topology (see `build_plan`)."""
    user = topology.user
    deploy = user.motor_deploy_config
    target = target or ("local" if deploy.deploy_mode == "local" else "kubernetes")
    if config_dir is None:
        if target == "local":
            raise ValueError("config_dir is required for a local plan: the directory holding the config copy")
        config_dir = KUBERNETES_CONFIG_DIR
    run_dir = run_dir or (
        KUBERNETES_RUN_DIR if target == "kubernetes" else str(PurePosixPath(config_dir).parent)
    )
    shared_pod = target == "local" or deploy.deploy_mode == "single_container"
    reached_at = {
        service: _reached_at(service, target=target, shared_pod=shared_pod, job_id=deploy.job_id)
        for service in (CONTROLLER, COORDINATOR_MGMT, KV_POOL)
    }
    tls = topology.tls
    controller_tls = tls_files(tls.mgmt_of(TLS_CONTROLLER))
    coordinator_tls = tls_files(tls.mgmt_of(TLS_COORDINATOR))
    controller_port = user.motor_controller_config.api_config.controller_api_port
    coordinator_mgmt_port = user.motor_coordinator_config.api_config.coordinator_api_mgmt_port
    return PlanContext(
        topology=topology,
        target=target,
        job_id=deploy.job_id,
        config_dir=config_dir,
        run_dir=run_dir,
        python=python or (sys.executable if target == "local" else "python3"),
        shared_pod=shared_pod,
        instances=tuple(instance_ports(topology.roles, kept_ordinals)),
        token=SecretRef(env=env_names.CONTROLLER_TOKEN),
        controller_tls=controller_tls,
        coordinator_tls=coordinator_tls,
        infer_tls=tls_files(tls.infer),
        controller_url=f"{url_scheme(controller_tls)}://{reached_at[CONTROLLER]}:{controller_port}",
        coordinator_mgmt_url=(
            f"{url_scheme(coordinator_tls)}://{reached_at[COORDINATOR_MGMT]}:{coordinator_mgmt_port}"
        ),
        store_config=(
            None
            if topology.pool is None
            else engine_store_config(topology.pool, master_host=reached_at[KV_POOL])
        ),
    )


def _reached_at(service: str, *, target: Target, shared_pod: bool, job_id: str) -> str:
    """The host a spec says the component behind `service` is reached at."""
    if target == "local":
        return LOCAL_HOST
    return HOST_PLACEHOLDER if shared_pod else service_host(service, job_id)


def tls_files(setting: TlsSetting | None) -> TlsFiles | None:
    """An enabled TLS setting as the paths a spec carries."""
    return None if setting is None else TlsFiles(**setting.config.paths)
