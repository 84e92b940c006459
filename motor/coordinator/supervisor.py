"""The coordinator with `inference_workers_config.num_workers` > 1: this process serves the management API and
supervises worker processes that share the inference port (SO_REUSEPORT).

- Instance set: this process owns it; every refresh is pushed to all workers as the whole set, and the
  refresh is answered once every running worker acknowledged it (bounded wait), so a request accepted after
  the controller's push sees the new set whichever worker takes it.
- Limits: the rate-limit bucket and the in-flight counters live in one shared file (see `limits.py`).
- Metrics: workers write prometheus_client multiprocess files, aggregated here on GET /metrics.
- Workers that die are restarted (at most MAX_RESTARTS per RESTART_WINDOW_S each; beyond that liveness fails).
"""

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest, multiprocess

from motor import __version__
from motor.coordinator.app_mgmt import ManagementApp
from motor.coordinator.control_channel import open_channel, read_message, write_message
from motor.coordinator.limits import SharedState
from motor.coordinator.metrics import InfoCollector, InstanceCollector
from motor.coordinator.registry import InstanceRegistry
from motor.coordinator.server import listen_socket, make_server, serve
from motor.coordinator.settings import CoordinatorSettings
from motor.protocol.instances import InstanceEvent, RefreshResult

log = logging.getLogger(__name__)

ACK_TIMEOUT_S = 1.0
MONITOR_INTERVAL_S = 0.5
MAX_RESTARTS = 5
RESTART_WINDOW_S = 60.0
STOP_GRACE_S = 8.0
PROMETHEUS_DIR_VAR = "PROMETHEUS_MULTIPROC_DIR"


@dataclass(eq=False)
class WorkerHandle:
    index: int
    process: subprocess.Popen[bytes] | None = None
    writer: asyncio.StreamWriter | None = None
    reader_task: asyncio.Task[None] | None = None
    ready: bool = False
    acked: int = -1
    callback_port: int | None = None
    restarts: deque[float] = field(default_factory=deque)
    given_up: bool = False

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


class Supervisor:
    def __init__(
        self,
        settings: CoordinatorSettings,
        required_roles: list[str],
        user_config: Path,
        env_config: Path,
        run_dir: Path,
    ) -> None:
        self.settings = settings
        self.profile = settings.profile.value
        self.required_roles = required_roles
        self.tracks_load = False
        self.registry = InstanceRegistry()
        self._user_config = user_config
        self._env_config = env_config
        self._prometheus_dir = run_dir / f"coordinator-{settings.mgmt_port}-metrics"
        shutil.rmtree(self._prometheus_dir, ignore_errors=True)
        self._prometheus_dir.mkdir(parents=True)
        self._state_path = run_dir / f"coordinator-{settings.mgmt_port}.state"
        rate = settings.config.rate_limit_config
        self.state = SharedState.create(self._state_path, initial_tokens=rate.max_requests)
        self.workers = [WorkerHandle(i) for i in range(settings.config.inference_workers_config.num_workers)]
        self._acked = asyncio.Event()
        self._mgmt_started = False
        self._started = False
        self._prometheus = CollectorRegistry()
        multiprocess.MultiProcessCollector(self._prometheus, path=str(self._prometheus_dir))
        self._prometheus.register(InstanceCollector(lambda: self.registry.role_states().items()))
        self._prometheus.register(InfoCollector(self.profile, __version__))

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
                "pid": w.process.pid if w.process is not None else None,
                "ready": w.ready,
                "restarts": len(w.restarts),
            }
            for w in self.workers
        ]
        failed = [w.index for w in self.workers if w.given_up]
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
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._acked.wait(), remaining)
        return result

    def metrics_text(self) -> bytes:
        return generate_latest(self._prometheus)

    # ---- workers -------------------------------------------------------------------------------------------

    def _broadcast(self) -> None:
        for worker in self.workers:
            if worker.ready:
                self._send_instances(worker)

    def _send_instances(self, worker: WorkerHandle) -> None:
        if worker.writer is None or worker.writer.is_closing():
            return
        instances = [instance.model_dump(mode="json") for instance in self.registry.snapshot()]
        write_message(
            worker.writer, {"type": "instances", "version": self.registry.version, "instances": instances}
        )

    async def start_worker(self, worker: WorkerHandle) -> None:
        parent, child = socket.socketpair()
        env = {**os.environ, PROMETHEUS_DIR_VAR: str(self._prometheus_dir)}
        worker.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "motor.coordinator.worker",
                "--user-config",
                str(self._user_config),
                "--env-config",
                str(self._env_config),
                "--index",
                str(worker.index),
                "--control-fd",
                str(child.fileno()),
                "--state",
                str(self._state_path),
            ],
            pass_fds=[child.fileno()],
            stdin=subprocess.DEVNULL,
            env=env,
        )
        child.close()
        worker.ready = False
        worker.acked = -1
        reader, worker.writer = await open_channel(parent)
        worker.reader_task = asyncio.create_task(self._follow(worker, reader))

    async def _follow(self, worker: WorkerHandle, reader: asyncio.StreamReader) -> None:
        while True:
            message = await read_message(reader)
            if message is None:
                worker.ready = False
                return
            kind = message.get("type")
            if kind == "ready":
                worker.callback_port = message.get("callback_port")
                worker.ready = True
                self._send_instances(worker)
                log.info("inference worker %d ready (pid %d)", worker.index, worker.process.pid)  # type: ignore[union-attr]
            elif kind == "ack":
                worker.acked = int(message["version"])
                self._acked.set()

    async def monitor(self) -> None:
        while True:
            await asyncio.sleep(MONITOR_INTERVAL_S)
            for worker in self.workers:
                if worker.given_up or worker.process is None or worker.process.poll() is None:
                    continue
                await self._restart(worker)

    async def _restart(self, worker: WorkerHandle) -> None:
        assert worker.process is not None
        code = worker.process.returncode
        pid = worker.process.pid
        multiprocess.mark_process_dead(pid, str(self._prometheus_dir))
        self.state.zero_slot(worker.index)
        now = time.monotonic()
        while worker.restarts and now - worker.restarts[0] > RESTART_WINDOW_S:
            worker.restarts.popleft()
        if len(worker.restarts) >= MAX_RESTARTS:
            worker.given_up = True
            log.error(
                "inference worker %d exited with %s %d times within %g s; not restarting it",
                worker.index,
                code,
                MAX_RESTARTS,
                RESTART_WINDOW_S,
            )
            return
        worker.restarts.append(now)
        log.warning("inference worker %d (pid %d) exited with %s; restarting it", worker.index, pid, code)
        await self.start_worker(worker)

    async def stop_workers(self) -> None:
        for worker in self.workers:
            if worker.running:
                worker.process.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        deadline = time.monotonic() + STOP_GRACE_S
        for worker in self.workers:
            if worker.process is None:
                continue
            while worker.process.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            if worker.process.poll() is None:
                worker.process.kill()
                worker.process.wait()
            if worker.reader_task is not None:
                worker.reader_task.cancel()
            if worker.writer is not None:
                worker.writer.close()
        self.state.close()


async def run_supervisor(
    settings: CoordinatorSettings,
    required_roles: list[str],
    stop: asyncio.Event,
    user_config: Path,
    env_config: Path,
) -> None:
    config = settings.config
    run_dir = (
        Path(settings.run_dir) if settings.run_dir else Path(tempfile.mkdtemp(prefix="motor-coordinator-"))
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    # Hold the inference port (bound, not listening, SO_REUSEPORT) so nothing else takes it between worker
    # restarts; only the workers' listening sockets receive connections.
    port_guard = listen_socket(settings.bind_host, settings.infer_port, reuse_port=True)
    mgmt_socket = listen_socket(settings.bind_host, settings.mgmt_port)
    supervisor = Supervisor(settings, required_roles, user_config, env_config, run_dir)
    for worker in supervisor.workers:
        await supervisor.start_worker(worker)
    monitor = asyncio.create_task(supervisor.monitor())
    mgmt = make_server(
        ManagementApp(
            supervisor, config.request_limit.max_body_bytes, refresh_token=settings.controller_token
        ),
        keep_alive_timeout=config.timeout_config.keep_alive_timeout,
        log_level=config.logging_config.log_level,
    )
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
        monitor.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await monitor
        await supervisor.stop_workers()
        port_guard.close()
