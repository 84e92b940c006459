"""The job supervisor of a local job: `python -m motor.deploy.local.job_supervisor --run-dir DIR`.

`motor deploy` starts one per job, detached (its own session, adopted by init; output in
`logs/supervisor.log`), and follows its progress in state.json. It starts the components of the job file (`job.json`) in order, waiting for each
startup probe (the node managers together, last), then supervises every one of them — the Mooncake master
included — as a motor.runtime SupervisedChild: restarted with backoff when it exits, stays unhealthy, or is
not healthy again in time after a restart, within a restart budget. Every change is logged and written to
state.json, which this process alone writes while it runs.

Signals: SIGTERM (or SIGINT) stops the job — node managers first, the pool last — and ends the supervisor;
SIGHUP applies the next generation of the job file (a scale or a config update, written by `motor deploy
--update-instance-num/--update-config`): removed instances are drained through the controller and stopped,
components whose revision changed are restarted, new ones started.

The components do not die with the supervisor: each runs in its own session, so killing the supervisor leaves
the cluster serving (unsupervised). `motor status` then says the supervisor is gone and `motor stop` stops the
components by the identities state.json recorded.
"""

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable
from pathlib import Path

import aiohttp
from pydantic import ValidationError

from motor.deploy.local.component import StartFailed, SupervisedComponent
from motor.deploy.local.job import ComponentJob, JobFile, read_job, write_job
from motor.deploy.local.state import (
    LOG_DIR,
    SUPERVISOR_LOG,
    Phase,
    RunState,
    SupervisorRecord,
    UpdateRecord,
    read_state,
    write_state,
)
from motor.deploy.local.stop import STOP_ORDER
from motor.protocol.controller import TerminateRequest, bearer
from motor.runtime.listeners import HeldListeners
from motor.runtime.processes import DEPLOY_GRACE_S, NODE_MANAGER_GRACE_S, start_ticks, stop_all
from motor.runtime.tls import client_context

log = logging.getLogger("motor.deploy.local.job_supervisor")

# The controller answers a terminate once the node manager stopped its engine (or after its own timeout).
TERMINATE_TIMEOUT_S = NODE_MANAGER_GRACE_S


class JobSupervisor:
    def __init__(self, run_dir: Path, state: RunState, job: JobFile, session: aiohttp.ClientSession) -> None:
        self.run_dir = run_dir
        self.state = state
        self.job = job
        self.components: dict[str, SupervisedComponent] = {}  # in job file order
        self.listeners = HeldListeners()  # the ports that outlive their components' processes
        self._session = session
        self._stop = asyncio.Event()
        self._update = asyncio.Event()

    async def run(self) -> int:
        """Start the job, supervise it and apply updates until told to stop; the exit code."""
        pid = os.getpid()
        self.state.supervisor = SupervisorRecord(
            pid=pid,
            start_ticks=start_ticks(pid) or 0,
            log=str(self.run_dir / LOG_DIR / SUPERVISOR_LOG),
            started_at=time.time(),
        )
        self.save()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._stop.set)
        loop.add_signal_handler(signal.SIGHUP, self._update.set)

        log.info("starting job %s (%d components)", self.state.job_id, len(self.job.components))
        try:
            started = await self._unless_stopped(self.start(self.job.components))
        except StartFailed as exc:
            log.error("%s; stopping what was started", exc)
            self._phase("failed", error=str(exc), error_log=exc.log)
            await self.stop_components()
            return 1
        if started:
            self._phase("running")
            log.info("job %s started; supervising it", self.state.job_id)
            while await self._next_signal():
                if not await self._unless_stopped(self.apply_next()):
                    break
        log.info("stopping job %s", self.state.job_id)
        self._phase("stopping")
        await self.stop_components()
        self._phase("stopped")
        return 0

    def save(self) -> None:
        self.state.components = [c.record for c in self.components.values() if c.record is not None]
        write_state(self.state)

    # ---- starting and stopping ---------------------------------------------------------------------------

    async def start(self, jobs: list[ComponentJob]) -> None:
        """Start `jobs` in order, each after the previous one answered its startup probe (node managers all at
        once, then waited for together), then supervise them. Raises StartFailed; what did start is then
        supervised only when the job already runs (an update), else left for `stop_components`."""
        launched = []
        try:
            for job in jobs:
                component = SupervisedComponent(
                    job,
                    token=self.state.token,
                    session=self._session,
                    on_record=self.save,
                    listeners=self.listeners,
                )
                self.components[job.name] = component
                try:
                    await component.launch()
                except StartFailed:
                    del self.components[job.name]
                    raise
                launched.append(component)
                if job.kind != "node_manager":
                    await component.wait_started()
            await _all_started([c for c in launched if c.job.kind == "node_manager"])
        except StartFailed:
            if self._running:
                for component in launched:
                    component.supervise()
            raise
        for component in launched:
            component.supervise()
            record = component.record
            log.info("%s started (pid %s)", component.name, record.pid if record else "?")

    async def stop_components(self) -> None:
        """Stop every component, kind by kind in STOP_ORDER, each kind at once within its grace. The held
        listeners close first: a stopped job refuses connections rather than keeping them waiting."""
        self.listeners.close()
        for component in self.components.values():
            await component.child.halt()
        for kind in STOP_ORDER:
            group = [c for c in self.components.values() if c.job.kind == kind and c.child.child is not None]
            if not group:
                continue
            log.info("stopping %s", ", ".join(c.name for c in group))
            for component in group:
                component.mark("stopping")
            await asyncio.to_thread(stop_all, [c.child.child for c in group if c.child.child], DEPLOY_GRACE_S)
            await asyncio.gather(*(c.clean_up() for c in group))
            for component in group:
                component.mark("stopped")

    # ---- updates ------------------------------------------------------------------------------------------

    async def apply_next(self) -> None:
        """Apply the job file's generation if it is newer than the one running, recording the progress."""
        try:
            job = read_job(self.run_dir)
        except (OSError, ValidationError) as exc:
            log.error("cannot read the job file: %s", exc)
            return
        if job.generation <= self.job.generation:
            return
        update = UpdateRecord(generation=job.generation)
        self.state.update = update
        self.save()
        log.info("applying job file generation %d", job.generation)
        try:
            await self._apply(job, update)
            update.status = "done"
        except StartFailed as exc:
            log.error("generation %d: %s", job.generation, exc)
            update.status, update.error = "failed", str(exc)
            if exc.log:
                update.error += f" (log: {exc.log})"
        except Exception as exc:  # the supervisor outlives a failed update: the job it runs matters more
            log.exception("generation %d failed", job.generation)
            update.status, update.error = "failed", f"{type(exc).__name__}: {exc}"
        finally:
            order = [c.name for c in job.components]
            self.components = dict(
                sorted(self.components.items(), key=lambda item: _position(order, item[0]))
            )
            self.job = JobFile(
                generation=job.generation, components=[c.job for c in self.components.values()]
            )
            write_job(self.run_dir, self.job)  # what runs now, whatever the outcome
            self.save()

    async def _apply(self, job: JobFile, update: UpdateRecord) -> None:
        removed = [c for name, c in self.components.items() if job.component(name) is None]
        for kind in STOP_ORDER:
            # the components of one kind drain at once: a conversion waits for the slowest, not for the sum
            group = [c for c in removed if c.job.kind == kind]
            for component in group:
                self._step(update, f"draining {component.name}")
            await asyncio.gather(*(self._drain_step(update, component) for component in group))
        for entry in job.components:
            running = self.components.get(entry.name)
            if running is None:
                continue
            if entry.revision == running.job.revision:
                running.job = entry
                continue
            self._step(update, f"restarting {entry.name}: its spec changed")
            await running.stop()
            await self.start([entry])
            self._step(update, f"restarted {entry.name}")
        added = [entry for entry in job.components if entry.name not in self.components]
        if added:
            names = ", ".join(entry.name for entry in added)
            self._step(update, f"starting {names}")
            await self.start(added)
            self._step(update, f"started {names}")

    async def _drain_step(self, update: UpdateRecord, component: SupervisedComponent) -> None:
        await self.drain(component)
        self._step(update, f"stopped {component.name}")

    async def drain(self, component: SupervisedComponent) -> None:
        """Remove a component: an instance is terminated through the controller (the coordinators stop routing
        to it, then its engine finishes what it serves and stops), anything else stopped."""
        await component.child.halt()
        component.mark("draining")
        terminated = component.job.kind == "node_manager" and await self._terminate(component.name)
        await component.stop(wait_for_exit_s=NODE_MANAGER_GRACE_S if terminated else 0.0)
        del self.components[component.name]
        self.save()

    async def _terminate(self, instance_id: str) -> bool:
        request = TerminateRequest(instance_id=instance_id, reason="removed by a scale-down")
        try:
            async with self._session.post(
                f"{self.state.controller_url}/controller/terminate_instance",
                json=request.model_dump(),
                headers=bearer(self.state.token),
                timeout=aiohttp.ClientTimeout(total=TERMINATE_TIMEOUT_S),
            ) as answer:
                body = await answer.text()
                if answer.status == 200:
                    return True
                log.warning(
                    "the controller refused to terminate %s: HTTP %d %s", instance_id, answer.status, body
                )
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning(
                "cannot terminate %s through the controller (%s); stopping it directly", instance_id, exc
            )
        return False

    # ---- helpers ------------------------------------------------------------------------------------------

    @property
    def _running(self) -> bool:
        return self.state.supervisor is not None and self.state.supervisor.phase == "running"

    def _phase(self, phase: Phase, *, error: str | None = None, error_log: str | None = None) -> None:
        supervisor = self.state.supervisor
        assert supervisor is not None
        supervisor.phase = phase
        supervisor.error, supervisor.error_log = error, error_log
        self.save()

    def _step(self, update: UpdateRecord, step: str) -> None:
        log.info("generation %d: %s", update.generation, step)
        update.steps.append(step)
        self.save()

    async def _unless_stopped(self, work: Awaitable[None]) -> bool:
        """Run `work` unless a stop is asked first (then cancel it): True when it finished."""
        task = asyncio.ensure_future(work)
        stop = asyncio.ensure_future(self._stop.wait())
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            return False
        task.result()  # raises what the work raised
        return True

    async def _next_signal(self) -> bool:
        """Wait for SIGHUP (True) or a stop (False)."""
        update = asyncio.ensure_future(self._update.wait())
        stop = asyncio.ensure_future(self._stop.wait())
        await asyncio.wait({update, stop}, return_when=asyncio.FIRST_COMPLETED)
        update.cancel()
        stop.cancel()
        if self._stop.is_set():
            return False
        self._update.clear()
        return True


async def _all_started(components: list[SupervisedComponent]) -> None:
    """Wait for every startup probe at once; the first StartFailed stops the other waits."""
    waits = [asyncio.create_task(component.wait_started()) for component in components]
    try:
        for finished in asyncio.as_completed(waits):
            await finished
    finally:
        for wait in waits:
            wait.cancel()


def _position(order: list[str], name: str) -> int:
    return order.index(name) if name in order else len(order)


async def supervise(run_dir: Path) -> int:
    try:
        state = read_state(run_dir)
        job = read_job(run_dir)
    except (OSError, ValidationError) as exc:
        log.error("cannot read the job in %s: %s", run_dir, exc)
        return 2
    if state is None:
        log.error("no state.json in %s: `motor deploy` writes it before it starts the supervisor", run_dir)
        return 2
    # Probes and the controller's terminate call use the management channel's TLS client settings, if any.
    connector = aiohttp.TCPConnector(ssl=client_context(state.mgmt_tls)) if state.mgmt_tls else None
    async with aiohttp.ClientSession(connector=connector) as session:
        return await JobSupervisor(run_dir, state, job, session).run()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m motor.deploy.local.job_supervisor", description=__doc__)
    parser.add_argument("--run-dir", required=True, type=Path, help="the job's run directory")
    args = parser.parse_args(argv)
    # Detach: the process `motor deploy` started exits at once and the supervisor carries on in a child that
    # init adopts, so it outlives `motor deploy` without being anyone's zombie-to-be.
    if os.fork() != 0:
        os._exit(0)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s supervisor %(name)s: %(message)s",
        stream=sys.stderr,
    )
    return asyncio.run(supervise(args.run_dir.resolve()))


if __name__ == "__main__":
    sys.exit(main())
