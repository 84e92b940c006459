"""`motor stop` for deploy_mode local: stop what a deploy started (and verify it is gone), nothing else.

The job supervisor is asked first (SIGTERM): it stops the components kind by kind and exits. Whatever it leaves
— or everything, when it is gone — is then stopped by the identities state.json recorded.
"""

import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import TextIO

from pydantic import ValidationError

from motor.deploy.local.job import job_path
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

# Stopped in this order: node managers first (each stops its engine), the control plane, the pool last.
STOP_ORDER = ("node_manager", "coordinator", "controller", "kv_pool")
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


def stop_recorded(state: RunState, out: TextIO, grace: float = DEPLOY_GRACE_S) -> list[int]:
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
            print(f"  stopping {', '.join(running)}", file=out)
        survivors += stop_groups(identities, grace)
        if kind == "node_manager":
            engines = [left_engine(Path(state.run_dir) / record.name) for record in records]
            survivors += stop_groups([e for e in engines if e is not None], ENGINE_SERVER_GRACE_S)
    return survivors


def stop_job(state: RunState, out: TextIO) -> list[int]:
    """Stop the job: through its supervisor while it runs, then by the recorded identities (all of them when the
    supervisor is gone); returns pids that survived (none, normally)."""
    supervisor = state.supervisor
    if supervisor is not None:
        identity = Identity(supervisor.pid, supervisor.start_ticks)
        if identity.alive():
            print(f"  asking the job supervisor (pid {supervisor.pid}) to stop the components", file=out)
            _signal(identity, signal.SIGTERM)
            if not _gone(identity, JOB_STOP_GRACE_S):
                print(
                    f"  the job supervisor did not exit within {JOB_STOP_GRACE_S:.0f} s: killing it", file=out
                )
                _signal(identity, signal.SIGKILL)
                _gone(identity, KILL_WAIT_S)
            with contextlib.suppress(OSError, ValidationError):  # else: stop by what the caller read
                state = read_state(Path(state.run_dir)) or state
            stopped = [record.name for record in state.components if record.state == "stopped"]
            if stopped:
                print(f"  the supervisor stopped {', '.join(stopped)}", file=out)
        else:
            print(
                f"  the job supervisor (pid {supervisor.pid}) is gone: stopping the recorded processes",
                file=out,
            )
    return stop_recorded(state, out)


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


def stop_local(run_root: Path, job_id: str | None, *, out: TextIO | None = None) -> int:
    """Stop job `job_id`, or the only job under `run_root` when it is None."""
    out = out or sys.stdout
    if job_id is None:
        jobs = deployed_jobs(run_root)
        if len(jobs) > 1:
            print(
                f"motor stop: several local jobs in {Path(run_root).resolve()} ({', '.join(jobs)}); "
                "say which with --job-id",
                file=sys.stderr,
            )
            return 2
        if not jobs:
            print(f"motor stop: nothing to stop: no local jobs in {Path(run_root).resolve()}", file=out)
            return 0
        job_id = jobs[0]
    run_dir = job_dir(run_root, job_id)
    try:
        state = read_state(run_dir)
    except (OSError, ValidationError) as exc:
        print(f"motor stop: cannot read {run_dir}/state.json: {exc}", file=sys.stderr)
        return 1
    if state is None:
        print(f"motor stop: nothing to stop: no local job {job_id!r} in {run_dir.parent}", file=out)
        return 0
    print(f"stopping local job {job_id} ({run_dir})", file=out)
    survivors = stop_job(state, out)
    if survivors:
        print(
            f"motor stop: processes {survivors} of job {job_id} are still alive after SIGKILL; "
            f"check them with `ps -o pid,stat,cmd -p {','.join(map(str, survivors))}`",
            file=sys.stderr,
        )
        return 1
    remove_job(run_dir)
    print(f"stopped: {len(state.components)} component(s); logs kept in {run_dir / 'logs'}", file=out)
    return 0
