"""`motor logs COMPONENT [-f]` for deploy_mode local: a component's log from the run directory (`logs/<name>.log`,
or with `--engine` the engine log `<name>/engine.log` its node manager keeps), its last lines or followed."""

import sys
import time
from pathlib import Path
from typing import BinaryIO, TextIO

from pydantic import ValidationError

from motor.deploy.local.state import LOG_DIR, deployed_jobs, job_dir, read_state

FOLLOW_POLL_S = 0.25
ENGINE_LOG = "engine.log"


def log_path(run_dir: Path, component: str, *, engine: bool) -> Path:
    return run_dir / component / ENGINE_LOG if engine else run_dir / LOG_DIR / f"{component}.log"


def logs_local(
    run_root: Path,
    job_id: str | None,
    component: str,
    *,
    lines: int = 50,
    follow: bool = False,
    engine: bool = False,
    out: TextIO | None = None,
    follow_for_s: float | None = None,
) -> int:
    """Print the last `lines` lines of the log; with `follow`, keep printing what is appended until Ctrl-C
    (or for `follow_for_s` seconds)."""
    out = out or sys.stdout
    if job_id is None:
        jobs = deployed_jobs(run_root)
        if len(jobs) != 1:
            found = ", ".join(jobs) or "none"
            print(
                f"motor logs: local jobs in {Path(run_root).resolve()}: {found}; say which with --job-id",
                file=sys.stderr,
            )
            return 2
        job_id = jobs[0]
    run_dir = job_dir(run_root, job_id)
    try:
        state = read_state(run_dir)
    except (OSError, ValidationError) as exc:
        print(f"motor logs: cannot read {run_dir}/state.json: {exc}", file=sys.stderr)
        return 1
    names = [record.name for record in state.components] if state else []
    engines = [record.name for record in state.components if record.kind == "node_manager"] if state else []
    if component not in (engines if engine else names):
        known = ", ".join(engines if engine else names) or "none (is the job deployed?)"
        what = "engine logs (node managers)" if engine else "components"
        print(f"motor logs: no {what} named {component!r} in job {job_id}; known: {known}", file=sys.stderr)
        return 2
    path = log_path(run_dir, component, engine=engine)
    try:
        with path.open("rb") as handle:
            out.write(_last_lines(handle.read(), lines))
            out.flush()
            if follow:
                _follow(handle, path, out, follow_for_s)
    except FileNotFoundError:
        print(f"motor logs: {path} does not exist (yet)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


def _last_lines(data: bytes, count: int) -> str:
    text = data.decode(errors="replace")
    kept = text.splitlines(keepends=True)[-count:] if count > 0 else []
    return "".join(kept)


def _follow(handle: BinaryIO, path: Path, out: TextIO, duration: float | None) -> None:
    deadline = None if duration is None else time.monotonic() + duration
    while deadline is None or time.monotonic() < deadline:
        chunk = handle.read()
        if chunk:
            out.write(chunk.decode(errors="replace"))
            out.flush()
            continue
        if path.stat().st_size < handle.tell():  # truncated or replaced: start over
            handle.seek(0)
        time.sleep(FOLLOW_POLL_S)
