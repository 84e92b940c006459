"""`motor logs COMPONENT [-f]` for deploy_mode local: a component's log from the run directory (`logs/<name>.log`;
`supervisor` is the job supervisor's; with `--engine` the engine log `<name>/engine.log` its node manager
keeps), its last lines or followed."""

import sys
import time
from pathlib import Path
from typing import BinaryIO, TextIO

from motor.deploy.local.state import LOG_DIR, SUPERVISOR_LOG, running_job

FOLLOW_POLL_S = 0.25
ENGINE_LOG = "engine.log"
SUPERVISOR = SUPERVISOR_LOG.removesuffix(".log")  # `motor logs supervisor`


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
    state = running_job(run_root, job_id, "motor logs")
    if isinstance(state, int):
        return state
    names = [SUPERVISOR, *(record.name for record in state.components)]
    engines = [record.name for record in state.components if record.kind == "node_manager"]
    if component not in (engines if engine else names):
        what = "engine logs (node managers)" if engine else "components"
        known = ", ".join(engines if engine else names)
        print(
            f"motor logs: no {what} named {component!r} in job {state.job_id}; known: {known}",
            file=sys.stderr,
        )
        return 2
    run_dir = Path(state.run_dir)
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
