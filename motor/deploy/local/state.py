"""The run directory `<run_root>/<job_id>/` and its `state.json`: what runs for a local job, so that status and
stop can find (and verify) exactly those processes later.

`motor deploy` writes the first state.json (the job, its URLs and controller token) and starts the job
supervisor; from then on the supervisor alone writes it: itself, every component it runs (pid, start time,
supervision state, restarts) and the progress of the last update. `motor stop` removes it.
"""

import json
import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from motor.deploy.errors import DeployError, UsageError
from motor.protocol.specs import TlsFiles

STATE_FILE = "state.json"
LOG_DIR = "logs"
SUPERVISOR_LOG = "supervisor.log"

# The supervision states of motor.runtime.supervision, plus `draining` (being removed by a scale-down) and
# `stopping` (the job is being stopped).
ComponentState = Literal[
    "starting", "healthy", "unhealthy", "restarting", "given_up", "draining", "stopping", "stopped"
]


class ProcessRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    kind: str
    pid: int
    start_ticks: int  # /proc start time: a reused pid has a different one
    argv: list[str]
    ports: dict[str, int]
    log: str
    started_at: float  # epoch seconds
    probe_url: str  # answers 200 while the component is fine
    state: ComponentState = "starting"
    restarts: int = 0  # by the supervisor, since this component was (re)deployed
    ready_at: float | None = None  # epoch seconds: when its startup probe first answered


Phase = Literal["starting", "running", "failed", "stopping", "stopped"]


class SupervisorRecord(BaseModel):
    """The job supervisor: `starting` the components, `running` (supervising them), `failed` to start them
    (`error`, with the log that says why), `stopping` or `stopped` the job."""

    model_config = ConfigDict(extra="forbid")

    pid: int
    start_ticks: int
    log: str
    started_at: float
    phase: Phase = "starting"
    error: str | None = None
    error_log: str | None = None


class UpdateRecord(BaseModel):
    """How the supervisor applies job file generation `generation` (a scale or a config update)."""

    model_config = ConfigDict(extra="forbid")

    generation: int
    status: Literal["running", "done", "failed"] = "running"
    steps: list[str] = []
    error: str | None = None


class RunState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    job_id: str
    run_dir: str
    config_dir: str
    created_at: float
    token: str
    controller_url: str
    coordinator_url: str
    coordinator_mgmt_url: str
    pool_metrics_url: str | None = None
    mgmt_tls: TlsFiles | None = None  # what the CLI presents to and trusts from the management ports
    model_base: str | None = None  # where the config copy's relative model paths resolve (the deploy's cwd)
    components: list[ProcessRecord] = []
    supervisor: SupervisorRecord | None = None
    update: UpdateRecord | None = None


def job_dir(run_root: Path, job_id: str) -> Path:
    return Path(run_root).resolve() / job_id


def deployed_jobs(run_root: Path) -> list[str]:
    """Job ids with a state.json under `run_root`."""
    root = Path(run_root).resolve()
    if not root.is_dir():
        return []
    return sorted(entry.name for entry in root.iterdir() if (entry / STATE_FILE).is_file())


def state_path(run_dir: Path) -> Path:
    return Path(run_dir) / STATE_FILE


def read_state(run_dir: Path) -> RunState | None:
    path = state_path(run_dir)
    if not path.exists():
        return None
    return RunState.model_validate_json(path.read_text(encoding="utf-8"))


def write_private(path: Path, model: BaseModel) -> None:
    """`model` as JSON at `path`, atomically (readers never see half a file), readable only by the owner."""
    temporary = path.with_suffix(".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(model.model_dump(mode="json"), indent=2) + "\n")
    os.replace(temporary, path)


def write_state(state: RunState) -> None:
    """Readable only by the owner: it holds the controller token."""
    write_private(state_path(Path(state.run_dir)), state)


def remove_state(run_dir: Path) -> None:
    state_path(run_dir).unlink(missing_ok=True)


def running_job(run_root: Path, job_id: str | None) -> RunState:
    """The state of job `job_id` (the only job under `run_root` when None); UsageError when the job is
    ambiguous, DeployError when it cannot be read or does not exist."""
    if job_id is None:
        jobs = deployed_jobs(run_root)
        if len(jobs) != 1:
            found = ", ".join(jobs) or "none"
            raise UsageError(f"local jobs in {Path(run_root).resolve()}: {found}; give --job-id")
        job_id = jobs[0]
    run_dir = job_dir(run_root, job_id)
    try:
        state = read_state(run_dir)
    except (OSError, ValidationError) as exc:
        raise DeployError(f"cannot read {run_dir}/state.json: {exc}") from exc
    if state is None:
        raise DeployError(f"no local job {job_id!r} in {run_dir.parent} (deploy it with `motor deploy`)")
    return state
