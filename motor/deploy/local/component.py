"""One component of a local job under the job supervisor: how it is started, probed, restarted and recorded.

A `SupervisedComponent` wraps motor.runtime's SupervisedChild with what a local job adds: the command and
environment of its job file entry (plus the controller token for the controller and the coordinator, and its
instance's credential for a node manager), its log file, HTTP
probes, the engine a dead node manager left behind (stopped before the node manager is started again), and
its `ProcessRecord` in state.json, rewritten at every change.
"""

import asyncio
import contextlib
import logging
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp

from motor.deploy.local.job import ComponentJob
from motor.deploy.local.state import ComponentState, ProcessRecord
from motor.deploy.local.stop import left_engine
from motor.protocol import env as env_names
from motor.protocol.credentials import instance_credential, instance_credential_env
from motor.runtime.backoff import Backoff
from motor.runtime.listeners import LISTEN_FDS_VAR, HeldListeners, listen_fds_value
from motor.runtime.logs import LogFile
from motor.runtime.processes import (
    DEPLOY_GRACE_S,
    ENGINE_SERVER_GRACE_S,
    Child,
    spawn,
    stop_all,
    stop_groups,
)
from motor.runtime.supervision import ChildState, Health, RestartPolicy, SupervisedChild

log = logging.getLogger(__name__)

STARTUP_TIMEOUT_S = 60.0
PROBE_TIMEOUT_S = 2.0
POLL_S = 0.1
TOKEN_KINDS = ("controller", "coordinator", "planner")
# Every kind is stopped within the deepest nested grace (a node manager stopping its engine server).
COMPONENT_RESTARTS = RestartPolicy(
    backoff=Backoff(initial_s=0.5, factor=2.0, cap_s=30.0, jitter=0.2),
    stop_grace_s=DEPLOY_GRACE_S,
    max_restarts=5,  # within window_s, then it is left stopped (`given_up`)
    window_s=300.0,
    unhealthy_restart_s=30.0,
    startup_timeout_s=STARTUP_TIMEOUT_S,
    poll_s=0.5,
)


class StartFailed(Exception):
    def __init__(self, message: str, log: str | None = None) -> None:
        super().__init__(message)
        self.log = log


class SupervisedComponent:
    def __init__(
        self,
        job: ComponentJob,
        *,
        token: str,
        session: aiohttp.ClientSession,
        on_record: Callable[[], None],
        listeners: HeldListeners,
        policy: RestartPolicy = COMPONENT_RESTARTS,
    ) -> None:
        """`on_record` is called whenever `record` changed (the supervisor writes state.json); `listeners` holds
        the sockets of the job's `held_listeners` ports across restarts."""
        self.job = job  # replaced by an update that keeps the revision: the next restart uses it
        self.record: ProcessRecord | None = None
        self.supervising = False
        self._listeners = listeners
        self._token = token
        self._session = session
        self._on_record = on_record
        self.child = SupervisedChild(
            job.name,
            self._spawn,
            policy,
            probe=lambda: self.probe(self.job.liveness_url),
            on_change=self._changed,
            on_exit=self._exited,
        )

    @property
    def name(self) -> str:
        return self.job.name

    async def launch(self) -> None:
        """Start the process (raises StartFailed when it cannot be executed) and record it."""
        try:
            await self.child.launch()
        except OSError as exc:
            raise StartFailed(f"cannot start {self.name} ({self.job.argv[0]}): {exc}") from exc
        self._record(self.child.state)

    async def wait_started(self, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        """Until its startup probe answers 200; StartFailed when it exits first or `timeout_s` passes."""
        deadline = time.monotonic() + timeout_s
        while await self.probe(self.job.startup_url) != "healthy":
            if not self.child.running:
                raise StartFailed(f"{self.name} exited while starting", self.job.log)
            if time.monotonic() > deadline:
                raise StartFailed(
                    f"{self.name} did not answer {self.job.startup_url} within {timeout_s:.0f} s",
                    self.job.log,
                )
            await asyncio.sleep(POLL_S)
        if self.record is not None:
            self.record.ready_at = time.time()
            self._on_record()

    def supervise(self) -> None:
        """Watch and restart it from now on."""
        if not self.supervising:
            self.supervising = True
            self.child.start().add_done_callback(self._supervision_ended)

    async def stop(self, *, wait_for_exit_s: float = 0.0) -> None:
        """Stop supervising it, give it `wait_for_exit_s` to exit by itself (e.g. after it was terminated
        through the controller), then stop what is left of its group, and of its engine."""
        await self.child.halt()
        self.supervising = False
        child = self.child.child
        if child is not None:
            await asyncio.to_thread(_wait_exit, child, wait_for_exit_s)
            await asyncio.to_thread(stop_all, [child], self.child.policy.stop_grace_s)
        await self.clean_up()

    async def clean_up(self) -> None:
        """Stop the engine server a node manager left (the kernel SIGTERMs it; this waits until it is gone)."""
        if self.job.kind != "node_manager":
            return
        engine = left_engine(Path(self.job.run_dir))
        if engine is not None and engine.group():
            log.info("%s: stopping the engine server it left (pid %d)", self.name, engine.pid)
            await asyncio.to_thread(stop_groups, [engine], ENGINE_SERVER_GRACE_S)

    def mark(self, state: ComponentState) -> None:
        self._record(state)

    async def probe(self, url: str) -> Health | None:
        try:
            async with self._session.get(url, timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S)) as answer:
                await answer.read()
                return "healthy" if answer.status == 200 else "unhealthy"
        except (aiohttp.ClientError, TimeoutError):
            return None

    def _spawn(self) -> Child:
        job = self.job
        env = {**os.environ, **job.env}
        fds = {name: self._listeners.get(address).fileno() for name, address in job.held_listeners.items()}
        if fds:
            env[LISTEN_FDS_VAR] = listen_fds_value(fds)
        if job.kind in TOKEN_KINDS:
            env[env_names.CONTROLLER_TOKEN] = self._token
        else:
            env.pop(env_names.CONTROLLER_TOKEN, None)
        if job.kind == "node_manager":
            env[instance_credential_env(job.name)] = instance_credential(self._token, job.name)
        Path(job.run_dir).mkdir(parents=True, exist_ok=True)
        restarts = self.child.restarts
        banner = f"{job.name} {f'restart {restarts}' if restarts else 'start'} by the job supervisor"
        return spawn(
            job.argv,
            env=env,
            cwd=Path(job.run_dir),
            log=LogFile(Path(job.log), banner=banner),
            pass_fds=list(fds.values()),
        )

    def _supervision_ended(self, task: "asyncio.Task[None]") -> None:
        if not task.cancelled() and task.exception() is not None:  # e.g. it could not be started again
            log.error("%s: supervision ended: %s", self.name, task.exception())
            self.mark("given_up")

    def _changed(self, state: ChildState) -> None:
        self._record(state)

    async def _exited(self, child: Child) -> None:
        await self.clean_up()

    def _record(self, state: ComponentState) -> None:
        child = self.child.child
        if child is None:
            return
        record = self.record
        if record is None or record.pid != child.pid:
            record = ProcessRecord(
                name=self.name,
                kind=self.job.kind,
                pid=child.pid,
                start_ticks=child.identity.start_ticks,
                argv=list(self.job.argv),
                ports=dict(self.job.ports),
                log=self.job.log,
                started_at=time.time(),
                probe_url=self.job.liveness_url,
            )
            self.record = record
        record.state = state
        record.restarts = self.child.restarts
        self._on_record()


def _wait_exit(child: Child, timeout_s: float) -> None:
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.popen.wait(timeout=timeout_s)
