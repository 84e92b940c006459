"""Scaling a running local job to given instance counts, the local scale path of the planner (motor.planner).

It is `motor deploy --update-instance-num` with the counts changed in the job's config copy (the baseline)
instead of in the user's file: the same `update_local`, so the job supervisor drains the instances a smaller
count drops through the controller and starts the new ones, and the call returns once the job is ready again.
Relative model paths resolve against the directory `motor deploy` ran in, as they did then.
"""

import json
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

from pydantic import ValidationError

from motor.config import ConfigError, load_documents
from motor.config.planner import COUNT_KEYS, PLANNED_ROLES
from motor.deploy.errors import DeployError
from motor.deploy.local.deploy import READY_TIMEOUT_S, current_state, with_local_model_paths
from motor.deploy.local.events import Progress, ignore
from motor.deploy.local.job import read_job
from motor.deploy.local.results import Unchanged, Updated
from motor.deploy.local.update import update_local


def deployed_counts(run_dir: Path) -> dict[str, int]:
    """Instances per role the job runs now: its job file, as the supervisor last wrote it."""
    try:
        job = read_job(run_dir)
    except (OSError, ValidationError) as exc:
        raise DeployError(f"cannot read the job file of {run_dir}: {exc}") from exc
    return dict(Counter(c.name.rsplit("-", 1)[0] for c in job.components if c.kind == "node_manager"))


def update_in_progress(run_dir: Path) -> str | None:
    """Why the job cannot be scaled now (None: it can)."""
    state = current_state(run_dir)
    if state is None or state.supervisor is None:
        return f"no job supervisor recorded in {run_dir}"
    if state.supervisor.phase != "running":
        return f"the job supervisor is {state.supervisor.phase} the job"
    if state.update is not None and state.update.status == "running":
        return f"the job supervisor applies update generation {state.update.generation}"
    return None


def scale_to(
    run_dir: Path,
    counts: Mapping[str, int],
    *,
    ready_timeout: float = READY_TIMEOUT_S,
    progress: Progress = ignore,
) -> Updated | Unchanged:
    """Scale the job in `run_dir` to `counts` (prefill and decode instances); raises DeployError."""
    state = current_state(run_dir)
    if state is None:
        raise DeployError(f"no local job runs in {run_dir}")
    config_dir = Path(state.config_dir)
    try:
        user = json.loads((config_dir / "user_config.json").read_text(encoding="utf-8"))
        env = json.loads((config_dir / "env.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DeployError(f"cannot read the deployed config in {config_dir}: {exc}") from exc
    for role in PLANNED_ROLES:
        if role in counts:
            user["motor_deploy_config"][COUNT_KEYS[role]] = counts[role]
    try:
        topology = load_documents(user, env)
    except ConfigError as exc:
        raise DeployError(
            f"the deployed config with {dict(counts)} does not validate", details=[str(i) for i in exc.issues]
        ) from exc
    if state.model_base is not None:
        topology = with_local_model_paths(topology, Path(state.model_base))
    return update_local(
        topology, Path(run_dir).parent, scale=True, ready_timeout=ready_timeout, progress=progress
    )
