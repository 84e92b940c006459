"""`motor stop` for deploy_mode local: stop what a deploy started (and verify it is gone), nothing else.

The job supervisor is asked first (SIGTERM): it stops the components kind by kind and exits. Whatever it leaves
— or everything, when it is gone — is then stopped by the identities state.json recorded.
"""

import contextlib
import os
import signal
import time
from pathlib import Path

from pydantic import ValidationError

from motor.deploy.errors import DeployError, UsageError
from motor.deploy.local.events import (
    AskingSupervisor,
    KillingSupervisor,
    Progress,
    Stopping,
    StoppingJob,
    SupervisorGone,
    SupervisorStopped,
    ignore,
)
from motor.deploy.local.job import job_path
from motor.deploy.local.results import NothingToStop, Stopped
from motor.deploy.local.state import RunState, deployed_jobs, job_dir, read_state, remove_state
from motor.protocol.node_manager import ENGINE_PID_FILE, EngineProcessRecord
from motor.runtime.processes import (
    DEPLOY_GRACE_S,
    ENGINE_SERVER_GRACE_S,
    KILL_WAIT_S,
    Identity,
    grace_around,
    stop_groups,
)

# Stopped in this order: the planner first (it must not scale a job being stopped), node managers (each stops
# its engine), the control plane, the pool last.
STOP_ORDER = ("planner", "node_manager", "coordinator", "controller", "kv_pool")
# What the supervisor needs to stop every kind in turn, each within its grace and the SIGKILL wait after it.
JOB_STOP_GRACE_S = grace_around(len(STOP_ORDER) * (DEPLOY_GRACE_S + KILL_WAIT_S))
POLL_S = 0.1


def left_engine(component_run_dir: Path) -> Identity | None:
    """The engine server a node manager recorded in its run directory (it may have outlived the node manager)."""
    try:
        text = (component_run_dir / ENGINE_PID_FILE).read_text(encoding="utf-8")
        engine = EngineProcessRecord.model_validate_json(text)
    except (OSError, ValidationError):
        return None
    return Identity(engine.pid, engine.start_ticks)


def stop_recorded(state: RunState, progress: Progress, grace: float = DEPLOY_GRACE_S) -> list[int]:
    """Stop every process recorded in `state`, kind by kind; returns pids that survived (none, normally)."""
    survivors: list[int] = []
    for kind in STOP_ORDER:
        records = [record for record in state.components if record.kind == kind]
        if not records:
            continue
        identities = [Identity(record.pid, record.start_ticks) for record in records]
        running = [
            record.name for record, identity in zip(records, identities, strict=True) if identity.alive()
        ]
        if running:
            progress(Stopping(running))
        survivors += stop_groups(identities, grace)
        if kind == "node_manager":
            engines = [left_engine(Path(state.run_dir) / record.name) for record in records]
            survivors += stop_groups([e for e in engines if e is not None], ENGINE_SERVER_GRACE_S)
    return survivors


def stop_job(state: RunState, progress: Progress) -> list[int]:
    """Stop the job: through its supervisor while it runs, then by the recorded identities (all of them when the
    supervisor is gone); returns pids that survived (none, normally)."""
    supervisor = state.supervisor
    if supervisor is not None:
        identity = Identity(supervisor.pid, supervisor.start_ticks)
        if identity.alive():
            progress(AskingSupervisor(supervisor.pid))
            _signal(identity, signal.SIGTERM)
            if not _gone(identity, JOB_STOP_GRACE_S):
                progress(KillingSupervisor(supervisor.pid, JOB_STOP_GRACE_S))
                _signal(identity, signal.SIGKILL)
                _gone(identity, KILL_WAIT_S)
            with contextlib.suppress(OSError, ValidationError):  # else: stop by what the caller read
                state = read_state(Path(state.run_dir)) or state
            stopped = [record.name for record in state.components if record.state == "stopped"]
            if stopped:
                progress(SupervisorStopped(stopped))
        else:
            progress(SupervisorGone(supervisor.pid))
    return stop_recorded(state, progress)


def _signal(identity: Identity, signum: int) -> None:
    if identity.alive():
        with contextlib.suppress(ProcessLookupError):  # it exited since
            os.kill(identity.pid, signum)


def _gone(identity: Identity, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while identity.alive():
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_S)
    return True


def remove_job(run_dir: Path) -> None:
    """Forget the job (its logs and config copy stay)."""
    remove_state(run_dir)
    job_path(run_dir).unlink(missing_ok=True)


def stop_local(run_root: Path, job_id: str | None, *, progress: Progress = ignore) -> Stopped | NothingToStop:
    """Stop job `job_id`, or the only job under `run_root` when it is None."""
    if job_id is None:
        jobs = deployed_jobs(run_root)
        if len(jobs) > 1:
            raise UsageError(
                f"several local jobs in {Path(run_root).resolve()} ({', '.join(jobs)}); say which with --job-id"
            )
        if not jobs:
            return NothingToStop(None, Path(run_root).resolve())
        job_id = jobs[0]
    run_dir = job_dir(run_root, job_id)
    try:
        state = read_state(run_dir)
    except (OSError, ValidationError) as exc:
        raise DeployError(f"cannot read {run_dir}/state.json: {exc}") from exc
    if state is None:
        return NothingToStop(job_id, run_dir.parent)
    progress(StoppingJob(job_id, str(run_dir)))
    survivors = stop_job(state, progress)
    if survivors:
        raise DeployError(
            f"processes {survivors} of job {job_id} are still alive after SIGKILL; "
            f"check them with `ps -o pid,stat,cmd -p {','.join(map(str, survivors))}`"
        )
    remove_job(run_dir)
    return Stopped(job_id, len(state.components), run_dir / "logs")
