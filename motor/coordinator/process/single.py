"""The coordinator as one process: inference, management and callback listeners in one event loop."""

import asyncio
import logging
import os
import socket
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from motor import __version__
from motor.coordinator.api.callback_listener import CallbackApp
from motor.coordinator.api.inference import inference_server
from motor.coordinator.api.management import ManagementApp
from motor.coordinator.circuits.keeper import CircuitCollector
from motor.coordinator.core import Core
from motor.coordinator.http.server import (
    HttpServer,
    coordinator_server,
    listen_socket,
    serve,
    servers_started,
)
from motor.coordinator.metrics import CoordinatorMetrics, InfoCollector, InstanceCollector
from motor.coordinator.registry import InstanceRegistry
from motor.coordinator.settings import CoordinatorSettings
from motor.protocol.instances import InstanceEvent, RefreshResult
from motor.runtime.listeners import inherited

log = logging.getLogger(__name__)


class LocalControl:
    """Management of a single-process coordinator: events go straight to the process's registry."""

    def __init__(
        self,
        registry: InstanceRegistry,
        profile: str,
        required_roles: tuple[str, ...],
        metrics: CoordinatorMetrics,
        prometheus: CollectorRegistry,
    ) -> None:
        self.registry = registry
        self.profile = profile
        self.required_roles = required_roles
        self._metrics = metrics
        self._prometheus = prometheus
        self.servers: list[tuple[HttpServer, socket.socket]] = []

    def started(self) -> bool:
        return bool(self.servers) and servers_started(self.servers)

    def liveness(self) -> tuple[bool, dict[str, Any]]:
        return True, {
            "message": "serving",
            "workers": [{"index": 0, "pid": os.getpid(), "ready": self.started()}],
        }

    async def refresh(self, event: InstanceEvent) -> RefreshResult:
        return self.registry.apply(event)

    def metrics_text(self) -> bytes:
        self._metrics.flush()
        return generate_latest(self._prometheus)


async def run_single_process(settings: CoordinatorSettings, stop: asyncio.Event) -> None:
    config = settings.config
    prometheus = CollectorRegistry()
    core = Core(settings, CoordinatorMetrics(prometheus))
    prometheus.register(InstanceCollector(lambda: core.registry.role_states().items()))
    prometheus.register(InfoCollector(settings.profile.value, __version__))
    if core.circuit_keeper is not None:
        prometheus.register(CircuitCollector(core.circuit_keeper))
    control = LocalControl(
        core.registry, settings.profile.value, settings.required_roles, core.metrics, prometheus
    )
    # a port the job supervisor holds (local deploys) outlives this process: no refused connection while it
    # restarts or its standby takes over
    infer_socket = inherited("infer") or listen_socket(settings.bind_host, settings.infer_port)
    mgmt_socket = listen_socket(settings.bind_host, settings.mgmt_port)
    callback_socket = listen_socket(settings.bind_host, 0)
    callback_port = callback_socket.getsockname()[1]
    await core.start(f"http://{settings.advertise_host}:{callback_port}")
    control.servers = [
        (inference_server(core, settings.infer_tls), infer_socket),
        (
            coordinator_server(
                ManagementApp(
                    control,
                    config.request_limit.max_body_bytes,
                    refresh_token=settings.controller_token,
                    endpoint_load=core.scheduler.endpoint_load,
                ),
                config,
                tls=settings.mgmt_tls,
            ),
            mgmt_socket,
        ),
        (coordinator_server(CallbackApp(core.callbacks), config), callback_socket),
    ]
    log.info(
        "coordinator serving the OpenAI API on %s:%d, management on %s:%d, decode callbacks on %s:%d; "
        "dispatch profile %s, scheduler %s",
        settings.bind_host,
        settings.infer_port,
        settings.bind_host,
        settings.mgmt_port,
        settings.bind_host,
        callback_port,
        settings.profile.value,
        config.scheduler_config.scheduler_type,
    )
    try:
        await serve(control.servers, stop)
    finally:
        await core.stop()
