"""The coordinator with `inference_workers_config.num_workers` > 1: this process serves the management API and
supervises worker processes that share the inference port (SO_REUSEPORT).

- Instance set: this process owns it; every refresh is pushed to all workers as the whole set, and the
  refresh is answered once every running worker acknowledged it (bounded wait), so a request accepted after
  the controller's push sees the new set whichever worker takes it.
- Limits: the rate-limit bucket and the in-flight counters live in one shared file (see `api/limits.py`).
- Circuit breakers: kept here; workers report their legs' outcomes, every change goes to all workers.
- Metrics: workers write prometheus_client multiprocess files, aggregated here on GET /metrics.
- Workers that die are restarted (at most MAX_RESTARTS per RESTART_WINDOW_S each; beyond that liveness fails).
"""

import asyncio
import logging
import os
import shutil
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest, multiprocess

from motor import __version__
from motor.coordinator.api.limits import SharedState
from motor.coordinator.api.management import ManagementApp
from motor.coordinator.circuits.breakers import CircuitView
from motor.coordinator.circuits.keeper import CircuitCollector, CircuitKeeper
from motor.coordinator.http.server import GRACEFUL_SHUTDOWN_SECONDS, coordinator_server, listen_socket, serve
from motor.coordinator.metrics import InfoCollector, InstanceCollector
from motor.coordinator.registry import InstanceRegistry
from motor.coordinator.settings import CoordinatorSettings
from motor.protocol.instances import InstanceEvent, RefreshResult
from motor.protocol.workers import (
    TO_SUPERVISOR,
    CircuitState,
    InstanceSet,
    InstanceSetAck,
    LegOutcome,
    ToSupervisor,
    WorkerReady,
)
from motor.runtime.backoff import Backoff
from motor.runtime.channel import Channel, open_channel
from motor.runtime.listeners import LISTEN_FDS_VAR, inherited, listen_fds_value
from motor.runtime.processes import Child, grace_around, spawn, stop_all
from motor.runtime.supervision import Health, RestartPolicy, SupervisedChild
from motor.runtime.tls import server_context
from motor.runtime.waits import wait_event

log = logging.getLogger(__name__)

ACK_TIMEOUT_S = 1.0
MONITOR_INTERVAL_S = 0.5
MAX_RESTARTS = 5
RESTART_WINDOW_S = 60.0
# A worker drains its connections for GRACEFUL_SHUTDOWN_SECONDS, then closes its engine sessions.
STOP_GRACE_S = grace_around(GRACEFUL_SHUTDOWN_SECONDS)
WORKER_RESTARTS = RestartPolicy(
    backoff=Backoff(initial_s=0.0),  # at once: the port and the instance set are ready for it
    stop_grace_s=STOP_GRACE_S,
    max_restarts=MAX_RESTARTS,
    window_s=RESTART_WINDOW_S,
    poll_s=MONITOR_INTERVAL_S,
)
PROMETHEUS_DIR_VAR = "PROMETHEUS_MULTIPROC_DIR"


@dataclass(eq=False)
class WorkerHandle:
    index: int
    supervised: SupervisedChild = field(init=False)
    channel: Channel[ToSupervisor] | None = None
    reader_task: asyncio.Task[None] | None = None
    ready: bool = False
    acked: int = -1
    callback_port: int | None = None

    @property
    def running(self) -> bool:
        return self.supervised.running

    async def health(self) -> Health:
        return "healthy" if self.ready else "starting"

    def disconnect(self) -> None:
        if self.reader_task is not None:
            self.reader_task.cancel()
        if self.channel is not None:
            self.channel.close()


class Supervisor:
    def __init__(
        self,
        settings: CoordinatorSettings,
        run_dir: Path,
        shared_infer: socket.socket | None = None,
    ) -> None:
        """`shared_infer`: the listening socket every worker accepts on, when this process inherited one."""
        self.settings = settings
        self.profile = settings.profile.value
        self._shared_infer = shared_infer
        self.required_roles = settings.required_roles
        self.registry = InstanceRegistry()
        self._spec_path = settings.spec_path
        self._prometheus_dir = run_dir / f"coordinator-{settings.mgmt_port}-metrics"
        shutil.rmtree(self._prometheus_dir, ignore_errors=True)
        self._prometheus_dir.mkdir(parents=True)
        self._state_path = run_dir / f"coordinator-{settings.mgmt_port}.state"
        rate = settings.config.rate_limit_config
        self.state = SharedState.create(self._state_path, initial_tokens=rate.max_requests)
        self.workers = [WorkerHandle(i) for i in range(settings.config.inference_workers_config.num_workers)]
        for worker in self.workers:
            worker.supervised = SupervisedChild(
                f"inference worker {worker.index}",
                lambda worker=worker: self._start_worker(worker),
                WORKER_RESTARTS,
                probe=worker.health,
                on_exit=lambda child, worker=worker: self._worker_exited(worker, child),
            )
        self._acked = asyncio.Event()
        self._mgmt_started = False
        self._started = False
        self._prometheus = CollectorRegistry()
        multiprocess.MultiProcessCollector(self._prometheus, path=str(self._prometheus_dir))
        self._prometheus.register(InstanceCollector(lambda: self.registry.role_states().items()))
        self._prometheus.register(InfoCollector(self.profile, __version__))
        circuits = settings.config.circuit_config
        self.circuit_keeper = (
            CircuitKeeper(circuits, self.registry.snapshot, self._circuits_changed)
            if circuits.enable
            else None
        )
        if self.circuit_keeper is not None:
            keeper = self.circuit_keeper
            self.registry.subscribe(lambda _: keeper.instances_changed())
            self._prometheus.register(CircuitCollector(keeper))

    # ---- Control (management API) --------------------------------------------------------------------------

    def started(self) -> bool:
        """True once every worker served; stays true while a crashed worker restarts (liveness reports that),
        so readiness never turns the coordinator away from the controller's pushes."""
        if not self._started:
            self._started = self._mgmt_started and all(w.ready for w in self.workers)
        return self._started

    def liveness(self) -> tuple[bool, dict[str, Any]]:
        workers = [
            {
                "index": w.index,
                "pid": w.supervised.pid,
                "ready": w.ready,
                "restarts": w.supervised.restarts,
            }
            for w in self.workers
        ]
        failed = [w.index for w in self.workers if w.supervised.state == "given_up"]
        if failed:
            message = f"inference worker(s) {failed} keep crashing and are no longer restarted; see the log"
            return False, {"message": message, "workers": workers}
        return True, {
            "message": f"{sum(w.ready for w in self.workers)}/{len(self.workers)} workers serving",
            "workers": workers,
        }

    async def refresh(self, event: InstanceEvent) -> RefreshResult:
        result = self.registry.apply(event)
        self._broadcast()
        deadline = time.monotonic() + ACK_TIMEOUT_S
        while any(w.ready and w.running and w.acked < result.version for w in self.workers):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                lagging = [w.index for w in self.workers if w.ready and w.acked < result.version]
                log.warning("workers %s did not acknowledge instance set %d in time", lagging, result.version)
                break
            self._acked.clear()
            await wait_event(self._acked, remaining)
        return result

    def metrics_text(self) -> bytes:
        return generate_latest(self._prometheus)

    # ---- workers -------------------------------------------------------------------------------------------

    def _broadcast(self) -> None:
        for worker in self.workers:
            if worker.ready:
                self._send_instances(worker)

    def _circuits_changed(self, view: CircuitView) -> None:
        self.registry.set_open_circuits(view.open)
        for worker in self.workers:
            if worker.ready:
                self._send_circuits(worker, view)

    def _send_circuits(self, worker: WorkerHandle, view: CircuitView) -> None:
        if worker.channel is None or worker.channel.closing:
            return
        worker.channel.send(CircuitState(open=sorted(view.open), suspects=sorted(view.suspects)))

    def _send_instances(self, worker: WorkerHandle) -> None:
        if worker.channel is None or worker.channel.closing:
            return
        worker.channel.send(InstanceSet(version=self.registry.version, instances=self.registry.snapshot()))

    async def start_workers(self) -> None:
        """Start every worker (raising when one cannot be started), then supervise them."""
        if self.circuit_keeper is not None:
            self.circuit_keeper.start()
        for worker in self.workers:
            await worker.supervised.launch()
            worker.supervised.start()

    async def _start_worker(self, worker: WorkerHandle) -> Child:
        parent, child = socket.socketpair()
        env = {**os.environ, PROMETHEUS_DIR_VAR: str(self._prometheus_dir)}
        fds = [child.fileno()]
        if self._shared_infer is not None:
            fds.append(self._shared_infer.fileno())
            env[LISTEN_FDS_VAR] = listen_fds_value({"infer": self._shared_infer.fileno()})
        try:
            process = spawn(
                [
                    sys.executable,
                    "-m",
                    "motor.coordinator.process.worker",
                    "--spec",
                    str(self._spec_path),
                    "--index",
                    str(worker.index),
                    "--control-fd",
                    str(child.fileno()),
                    "--state",
                    str(self._state_path),
                ],
                env=env,
                own_group=False,  # stopped with the coordinator's group
                pass_fds=fds,
            )
        finally:
            child.close()
        worker.ready = False
        worker.acked = -1
        worker.channel = await open_channel(parent, TO_SUPERVISOR)
        worker.reader_task = asyncio.create_task(self._follow(worker, worker.channel))
        return process

    async def _follow(self, worker: WorkerHandle, channel: Channel[ToSupervisor]) -> None:
        while True:
            message = await channel.receive()
            if message is None:
                worker.ready = False
                return
            if isinstance(message, WorkerReady):
                worker.callback_port = message.callback_port
                worker.ready = True
                self._send_instances(worker)
                if self.circuit_keeper is not None:
                    self._send_circuits(worker, self.circuit_keeper.view)
                log.info("inference worker %d ready (pid %s)", worker.index, worker.supervised.pid)
            elif isinstance(message, InstanceSetAck):
                worker.acked = message.version
                self._acked.set()
            elif isinstance(message, LegOutcome) and self.circuit_keeper is not None:
                self.circuit_keeper.report(message.instance_id, message.ok)

    def _worker_exited(self, worker: WorkerHandle, child: Child) -> None:
        worker.ready = False
        worker.disconnect()
        multiprocess.mark_process_dead(child.pid, str(self._prometheus_dir))
        self.state.zero_slot(worker.index)

    async def stop_workers(self) -> None:
        """SIGTERM every worker at once, SIGKILL those still there after STOP_GRACE_S."""
        for worker in self.workers:
            await worker.supervised.halt()
        children = [w.supervised.child for w in self.workers if w.supervised.child is not None]
        await asyncio.to_thread(stop_all, children, STOP_GRACE_S)
        for worker in self.workers:
            worker.disconnect()
        if self.circuit_keeper is not None:
            await self.circuit_keeper.stop()
        self.state.close()


async def run_supervisor(
    settings: CoordinatorSettings,
    stop: asyncio.Event,
) -> None:
    config = settings.config
    run_dir = (
        Path(settings.run_dir) if settings.run_dir else Path(tempfile.mkdtemp(prefix="motor-coordinator-"))
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    # Hold the inference port (bound, not listening, SO_REUSEPORT) so nothing else takes it between worker
    # restarts; only the workers' listening sockets receive connections.
    # (or share the one this process inherited: the job supervisor's, which outlives this process)
    shared = inherited("infer")
    port_guard = shared or listen_socket(settings.bind_host, settings.infer_port, reuse_port=True)
    mgmt_socket = listen_socket(settings.bind_host, settings.mgmt_port)
    supervisor = Supervisor(settings, run_dir, shared_infer=shared)
    if settings.infer_tls is not None:
        server_context(settings.infer_tls)  # a broken certificate stops the coordinator, not each worker
    mgmt = coordinator_server(
        ManagementApp(
            supervisor, config.request_limit.max_body_bytes, refresh_token=settings.controller_token
        ),
        config,
        tls=settings.mgmt_tls,
    )
    await supervisor.start_workers()
    mgmt_serving = asyncio.create_task(serve([(mgmt, mgmt_socket)], stop))
    while not mgmt.started and not mgmt_serving.done():
        await asyncio.sleep(0.01)
    supervisor._mgmt_started = True
    log.info(
        "coordinator supervising %d inference workers on %s:%d, management on %s:%d; dispatch profile %s",
        len(supervisor.workers),
        settings.bind_host,
        settings.infer_port,
        settings.bind_host,
        settings.mgmt_port,
        settings.profile.value,
    )
    try:
        await mgmt_serving
    finally:
        await supervisor.stop_workers()
        port_guard.close()
