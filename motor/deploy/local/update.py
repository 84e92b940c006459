"""`motor deploy --update-instance-num` and `--update-config` on a running local job.

As on Kubernetes (motor.deploy.k8s.backend): the config copy in the run directory is the baseline; a scale may
change only the instance counts (`SCALE_WHITELIST`), a config update only whitelisted fields
(`UPDATE_WHITELIST`), and env.json may not change. The new plan keeps the ordinals — so the ports — of the
instances that stay. Its specs go to the config directory, the next generation of the job file to job.json,
and the job supervisor gets SIGHUP: it drains and stops removed instances (through the controller: the
coordinators stop routing to them before their engines finish what they serve and stop), restarts the
components whose spec changed and starts new instances. This command reports the supervisor's steps, waits
until the job is ready again (new instances active, removed ones gone), and only then makes the new config the
baseline.

A node manager whose spec changes in a config update (its log level) keeps running, as on Kubernetes: the
change takes effect at its next restart, so that its engine is not restarted for a log level.
"""

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from motor.config import ConfigError, Topology
from motor.config.whitelist import (
    INSTANCE_COUNT_KEYS,
    SCALE_WHITELIST,
    UPDATE_WHITELIST,
    changed_paths,
    refused_changes,
)
from motor.deploy.errors import DeployError, Refused, UpdateFailed, UsageError
from motor.deploy.local.component import STARTUP_TIMEOUT_S
from motor.deploy.local.deploy import (
    READY_TIMEOUT_S,
    config_documents,
    current_state,
    wait_ready,
    write_config_files,
)
from motor.deploy.local.events import Progress, UpdateStep, Updating, ignore
from motor.deploy.local.job import JobFile, job_from_plan, read_job, write_job
from motor.deploy.local.probes import port_in_use
from motor.deploy.local.results import Unchanged, Updated
from motor.deploy.local.state import RunState, UpdateRecord, job_dir
from motor.deploy.local.stop import JOB_STOP_GRACE_S
from motor.deploy.plan import Plan, build_plan
from motor.protocol.specs import spec_file_name
from motor.runtime.processes import Identity

POLL_S = 0.1
SCALE = "--update-instance-num"
UPDATE = "--update-config"


def update_local(
    topology: Topology,
    run_root: Path,
    *,
    scale: bool,
    ready_timeout: float = READY_TIMEOUT_S,
    progress: Progress = ignore,
) -> Updated | Unchanged:
    """Scale (`scale`) or update the config of the running local job of `topology`'s job_id."""
    option = SCALE if scale else UPDATE
    job_id = topology.user.motor_deploy_config.job_id
    run_dir = job_dir(run_root, job_id)
    state = current_state(run_dir)
    if state is None:
        raise DeployError(
            f"no local job {job_id!r} runs in {run_dir.parent}; deploy it first with `motor deploy` (a "
            "Kubernetes deployment is updated when the config sets its deploy_mode)"
        )
    refusal = _refuse_state(state, job_id, run_root)
    if refusal:
        raise DeployError(refusal)
    user_baseline, env_baseline, current = _baseline(state)
    user, env = config_documents(topology)
    _check_refused(option, user, env, user_baseline, env_baseline)
    changed = changed_paths(user, user_baseline)
    if not changed:
        return Unchanged(scale, run_dir)

    kept = {c.name: c.ordinal for c in current.components if c.ordinal is not None}
    try:
        plan = build_plan(
            topology, target="local", config_dir=state.config_dir, run_dir=state.run_dir, kept_ordinals=kept
        )
    except ConfigError as exc:
        raise UsageError(
            f"{len(exc.issues)} problem(s) in the new plan:", details=[str(issue) for issue in exc.issues]
        ) from exc
    # A config update leaves node managers running (their change waits for their next restart); a scale
    # restarts whatever changed, which is nothing that stays: kept ordinals keep their specs as they were.
    deferred = {} if scale else {c.name: c.revision for c in current.components if c.kind == "node_manager"}
    job = job_from_plan(plan, run_dir, generation=current.generation + 1, kept_revisions=deferred)
    port_problem = _port_problem(plan, current)
    if port_problem:
        raise DeployError(port_problem)

    began = time.monotonic()
    waiting = _waiting(plan, Path(state.config_dir), deferred)
    removed = [c.name for c in current.components if job.component(c.name) is None]
    restarting = [
        c.name for c in job.components if (old := current.component(c.name)) and old.revision != c.revision
    ]
    progress(Updating(job_id, scale, changed))
    for name, text in plan.files.items():
        (Path(state.config_dir) / name).write_text(text, encoding="utf-8")
    write_job(run_dir, job)
    assert state.supervisor is not None
    os.kill(state.supervisor.pid, signal.SIGHUP)
    try:
        update = _follow(run_dir, job, progress, began)
        if update.status == "failed":
            raise DeployError(f"the supervisor could not apply the update: {update.error}")
        wait_ready(
            state,
            {c.name for c in plan.node_managers},
            progress,
            began,
            ready_timeout,
            absent=frozenset(removed),
        )
    except DeployError as exc:
        raise UpdateFailed(exc.message, job_id=job_id, log=exc.log) from exc
    for name in removed:
        (Path(state.config_dir) / spec_file_name(name)).unlink(missing_ok=True)
    write_config_files(plan, topology, run_dir)
    per_role: dict[str, int] = {}
    for component in plan.node_managers:
        per_role[str(component.role)] = per_role.get(str(component.role), 0) + 1
    return Updated(job_id, scale, per_role, restarting, waiting, time.monotonic() - began)


def _refuse_state(state: RunState, job_id: str, run_root: Path) -> str | None:
    supervisor = state.supervisor
    if supervisor is None or not Identity(supervisor.pid, supervisor.start_ticks).alive():
        return (
            f"the job supervisor of {job_id!r} is gone, so nothing would apply the change; restart the job "
            f"with `motor stop --job-id {job_id} --run-root {run_root}` and `motor deploy`"
        )
    if supervisor.phase != "running":
        return f"the job supervisor is {supervisor.phase} the job; try again once `motor status` says running"
    if state.update is not None and state.update.status == "running":
        return f"the supervisor is still applying update generation {state.update.generation}; wait for it"
    return None


def _baseline(state: RunState) -> tuple[dict[str, Any], dict[str, Any], JobFile]:
    """The deployed user_config.json, env.json and job file; DeployError when they cannot be read."""
    config_dir = Path(state.config_dir)
    try:
        user = json.loads((config_dir / "user_config.json").read_text(encoding="utf-8"))
        env = json.loads((config_dir / "env.json").read_text(encoding="utf-8"))
        return user, env, read_job(Path(state.run_dir))
    except (OSError, ValueError, ValidationError) as exc:
        raise DeployError(
            f"cannot read the deployed baseline in {state.run_dir} ({exc}); redeploy the job "
            "(`motor stop`, then `motor deploy`)"
        ) from exc


def _check_refused(
    option: str, user: dict[str, Any], env: dict[str, Any], old_user: dict[str, Any], old_env: dict[str, Any]
) -> None:
    """Refused when a change is not on the option's whitelist (or env.json changed)."""
    whitelist = SCALE_WHITELIST if option == SCALE else UPDATE_WHITELIST
    refused = refused_changes(user, old_user, whitelist)
    refused += [f"env.json:{path}" for path in changed_paths(env, old_env)]
    if not refused:
        return
    if option == SCALE:
        allowed = "only changes " + ", ".join(sorted(INSTANCE_COUNT_KEYS))
    else:
        allowed = "only changes log_level and the coordinator's exception_config and timeout_config"
    counts = option == UPDATE and any(path.rsplit(".", 1)[-1] in INSTANCE_COUNT_KEYS for path in refused)
    raise Refused(
        f"refused: it {allowed}; these changes need a redeploy (`motor stop`, `motor deploy`):",
        details=refused,
        hint=f"change instance counts with {SCALE}" if counts else None,
    )


def _port_problem(plan: Plan, current: JobFile) -> str | None:
    """Ports of the new plan used twice, or ports of new components already taken on this host."""
    owners: dict[int, str] = {}
    for component in plan.components:
        for name, port in component.ports.items():
            other = owners.setdefault(port, f"{component.name} {name}")
            if other != f"{component.name} {name}":
                return f"port {port} would serve both {other} and {component.name} {name}; change the ports"
    busy = [
        f"{port} ({component.name} {name})"
        for component in plan.components
        if current.component(component.name) is None
        for name, port in component.ports.items()
        if port_in_use(port)
    ]
    if busy:
        return f"port(s) the new instances need are in use on this host: {', '.join(busy)}"
    return None


def _waiting(plan: Plan, config_dir: Path, deferred: dict[str, str]) -> list[str]:
    """Node managers whose spec changes but which keep running until their next restart."""
    names = []
    for name in deferred:
        path = config_dir / spec_file_name(name)
        new = plan.files.get(spec_file_name(name))
        try:
            if new is not None and path.read_text(encoding="utf-8") != new:
                names.append(name)
        except OSError:
            continue
    return names


def _follow(run_dir: Path, job: JobFile, progress: Progress, began: float) -> UpdateRecord:
    """Report the supervisor's steps for `job`'s generation until it applied it."""
    reported = 0
    deadline = time.monotonic() + JOB_STOP_GRACE_S + STARTUP_TIMEOUT_S * (len(job.components) + 1)
    while True:
        state = current_state(run_dir)
        supervisor = state.supervisor if state is not None else None
        if state is None or supervisor is None:
            raise DeployError(f"{run_dir}/state.json vanished during the update")
        if not Identity(supervisor.pid, supervisor.start_ticks).alive():
            raise DeployError("the job supervisor exited during the update", log=Path(supervisor.log))
        update = state.update
        if update is not None and update.generation == job.generation:
            for step in update.steps[reported:]:
                progress(UpdateStep(time.monotonic() - began, step))
            reported = len(update.steps)
            if update.status != "running":
                return update
        if time.monotonic() > deadline:
            raise DeployError("the job supervisor did not apply the update in time", log=Path(supervisor.log))
        time.sleep(POLL_S)
