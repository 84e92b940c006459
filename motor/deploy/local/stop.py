"""`motor stop` for deploy_mode local: stop what a deploy started (and verify it is gone), nothing else."""

import sys
from pathlib import Path
from typing import TextIO

from pydantic import ValidationError

from motor.deploy.local.state import RunState, deployed_jobs, job_dir, read_state, remove_state
from motor.protocol.node_manager import ENGINE_PID_FILE, EngineProcessRecord
from motor.runtime.processes import DEPLOY_GRACE_S, Identity, stop_groups

# Stopped in this order: node managers first (each stops its engine), the control plane, the pool last.
STOP_ORDER = ("node_manager", "coordinator", "controller", "kv_pool")


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
            survivors += stop_groups(_orphaned_engines(state), grace)
    return survivors


def _orphaned_engines(state: RunState) -> list[Identity]:
    """Engines whose node manager died without stopping them (it records each engine it starts)."""
    found = []
    for record in state.components:
        if record.kind != "node_manager":
            continue
        path = Path(state.run_dir) / record.name / ENGINE_PID_FILE
        try:
            engine = EngineProcessRecord.model_validate_json(path.read_text(encoding="utf-8"))
        except (OSError, ValidationError):
            continue
        found.append(Identity(engine.pid, engine.start_ticks))
    return found


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
    survivors = stop_recorded(state, out)
    if survivors:
        print(
            f"motor stop: processes {survivors} of job {job_id} are still alive after SIGKILL; "
            f"check them with `ps -o pid,stat,cmd -p {','.join(map(str, survivors))}`",
            file=sys.stderr,
        )
        return 1
    remove_state(run_dir)
    print(f"stopped: {len(state.components)} component(s); logs kept in {run_dir / 'logs'}", file=out)
    return 0
