"""`motor logs COMPONENT [-f]` for deploy_mode local: a component's log from the run directory (`logs/<name>.log`;
`supervisor` is the job supervisor's; with `--engine` the engine log `<name>/engine.log` its node manager
keeps), its last lines or followed."""

import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from motor.deploy.errors import UsageError
from motor.deploy.local.state import LOG_DIR, SUPERVISOR_LOG, running_job

FOLLOW_POLL_S = 0.25
ENGINE_LOG = "engine.log"
SUPERVISOR = SUPERVISOR_LOG.removesuffix(".log")  # `motor logs supervisor`


def log_path(run_dir: Path, component: str, *, engine: bool) -> Path:
    return run_dir / component / ENGINE_LOG if engine else run_dir / LOG_DIR / f"{component}.log"


def component_log(run_root: Path, job_id: str | None, component: str, *, engine: bool = False) -> Path:
    """The log of `component` (with `engine`: of its engine) in the job; UsageError when the job has none."""
    state = running_job(run_root, job_id)
    names = [SUPERVISOR, *(record.name for record in state.components)]
    engines = [record.name for record in state.components if record.kind == "node_manager"]
    if component not in (engines if engine else names):
        what = "engine logs (node managers)" if engine else "components"
        known = ", ".join(engines if engine else names)
        raise UsageError(f"no {what} named {component!r} in job {state.job_id}; known: {known}")
    return log_path(Path(state.run_dir), component, engine=engine)


def log_text(
    path: Path, lines: int = 50, *, follow: bool = False, follow_for_s: float | None = None
) -> Iterator[str]:
    """The last `lines` lines of the log; with `follow`, then what is appended, until the caller stops (or
    for `follow_for_s` seconds). FileNotFoundError when the log does not exist (yet)."""
    with path.open("rb") as handle:
        yield _last_lines(handle.read(), lines)
        if follow:
            yield from _appended(handle, path, follow_for_s)


def _last_lines(data: bytes, count: int) -> str:
    text = data.decode(errors="replace")
    kept = text.splitlines(keepends=True)[-count:] if count > 0 else []
    return "".join(kept)


def _appended(handle: BinaryIO, path: Path, duration: float | None) -> Iterator[str]:
    deadline = None if duration is None else time.monotonic() + duration
    while deadline is None or time.monotonic() < deadline:
        chunk = handle.read()
        if chunk:
            yield chunk.decode(errors="replace")
            continue
        if path.stat().st_size < handle.tell():  # truncated or replaced: start over
            handle.seek(0)
        time.sleep(FOLLOW_POLL_S)
