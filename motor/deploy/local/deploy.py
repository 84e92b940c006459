"""`motor deploy` for deploy_mode local: run a Plan as processes on this machine and wait until it serves.

Nothing is computed here: the Plan says what to start, with which command, environment and ports. The
backend adds the per-run controller token, writes the config copy, the plan's files and the job file, and
starts the job supervisor (motor.deploy.local.job_supervisor), which starts the components in plan order and keeps
them running. It follows the supervisor's progress in state.json, then waits for the coordinator to be ready
with every instance active, reporting each step to the caller's `Progress`. Any failure stops everything that
was started and raises a motor.deploy.errors.DeployError.
"""

import dataclasses
import json
import secrets
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from motor.config import Topology
from motor.deploy.errors import DeployError, UsageError
from motor.deploy.local.component import STARTUP_TIMEOUT_S
from motor.deploy.local.events import (
    ComponentStarted,
    Deploying,
    Progress,
    Readiness,
    StoppingStarted,
    SupervisorStarted,
    ignore,
)
from motor.deploy.local.job import job_from_plan, write_job
from motor.deploy.local.probes import http_status, port_in_use
from motor.deploy.local.results import Deployed
from motor.deploy.local.state import (
    LOG_DIR,
    SUPERVISOR_LOG,
    RunState,
    job_dir,
    read_state,
    write_state,
)
from motor.deploy.local.stop import remove_job, stop_job
from motor.deploy.plan import LOCAL_HOST, Plan
from motor.deploy.prometheus import CONFIG_FILE, PROMETHEUS_DIR, prometheus_files
from motor.protocol.controller import ControllerState, InstanceView, bearer
from motor.protocol.specs import NodeManagerSpec
from motor.runtime.logs import LogFile, tail
from motor.runtime.processes import Identity, spawn

READY_TIMEOUT_S = 600.0
LAUNCH_TIMEOUT_S = 30.0  # until the supervisor detached and recorded itself
POLL_S = 0.1


def deploy_local(
    plan: Plan,
    topology: Topology,
    run_root: Path,
    *,
    ready_timeout: float = READY_TIMEOUT_S,
    progress: Progress = ignore,
) -> Deployed:
    if plan.target != "local":
        raise UsageError(f"the local backend runs local plans; this one targets {plan.target}")
    run_dir = job_dir(run_root, plan.job_id)
    refusal = _refuse_running(run_dir, plan.job_id, run_root) or _refuse_busy_ports(plan)
    if refusal:
        raise DeployError(refusal)
    began = time.monotonic()
    progress(Deploying(plan.job_id, str(run_dir)))
    state = _prepare(plan, topology, run_dir)
    try:
        _start_supervisor(run_dir, progress, began)
        _follow_start(run_dir, progress, began, len(plan.components))
        wait_ready(state, {c.name for c in plan.node_managers}, progress, began, ready_timeout)
    except BaseException:
        progress(StoppingStarted())
        stop_job(current_state(run_dir) or state, progress)
        remove_job(run_dir)
        raise
    return _deployed(plan, topology, state, run_root, time.monotonic() - began)


def _refuse_running(run_dir: Path, job_id: str, run_root: Path) -> str | None:
    try:
        state = read_state(run_dir)
    except (OSError, ValidationError):
        return None  # unreadable leftovers: overwritten
    if state is None:
        return None
    running = [r.name for r in state.components if Identity(r.pid, r.start_ticks).group()]
    supervisor = state.supervisor
    if supervisor is not None and Identity(supervisor.pid, supervisor.start_ticks).alive():
        running.insert(0, f"job supervisor pid {supervisor.pid}")
    if not running:
        return None
    return (
        f"job {job_id!r} is already running locally ({', '.join(running)}; run directory {run_dir}); "
        f"refusing to start it twice. See it with `motor status --job-id {job_id} --run-root {run_root}`, "
        f"stop it with `motor stop --job-id {job_id} --run-root {run_root}`, or give the new one another job_id"
    )


def _refuse_busy_ports(plan: Plan) -> str | None:
    busy = [
        f"{port} ({component.name} {name})"
        for component in plan.components
        for name, port in component.ports.items()
        if port_in_use(port)
    ]
    if not busy:
        return None
    return (
        f"port(s) already in use on {LOCAL_HOST}: {', '.join(busy)}; stop what uses them or change the ports "
        "in user_config.json (`motor validate` lists every port)"
    )


MODEL_PATH_OPTIONS = ("model", "tokenizer")


def with_local_model_paths(topology: Topology, base: Path) -> Topology:
    """The topology with every relative `model`/`tokenizer` path that exists under `base` made absolute:
    engines start in their own run directories."""
    roles = {}
    for role, spec in topology.roles.items():
        engine_config = dict(spec.engine_config)
        for option in MODEL_PATH_OPTIONS:
            for key in (option, option.replace("_", "-")):
                value = engine_config.get(key)
                if isinstance(value, str) and not Path(value).is_absolute() and (base / value).exists():
                    engine_config[key] = str((base / value).resolve())
        roles[role] = dataclasses.replace(spec, engine_config=engine_config)
    return dataclasses.replace(topology, roles=roles)


def config_documents(topology: Topology) -> tuple[dict[str, Any], dict[str, Any]]:
    """user_config.json and env.json as the run directory keeps them (the baseline of later updates)."""
    user = topology.user.model_dump(mode="json", exclude_unset=True, by_alias=True)
    return user, topology.env.model_dump(mode="json", exclude_unset=True)


def write_config_files(plan: Plan, topology: Topology, run_dir: Path) -> None:
    """The config copy, the plan's files (every spec) and the Prometheus files of the job."""
    config_dir = Path(plan.config_dir)
    config_dir.mkdir(parents=True, exist_ok=True)
    user, env = config_documents(topology)
    Path(plan.user_config_path).write_text(json.dumps(user, indent=2) + "\n", encoding="utf-8")
    Path(plan.env_config_path).write_text(json.dumps(env, indent=2) + "\n", encoding="utf-8")
    for name, text in plan.files.items():
        (config_dir / name).write_text(text, encoding="utf-8")
    prometheus_dir = run_dir / PROMETHEUS_DIR
    prometheus_dir.mkdir(exist_ok=True)
    for name, text in prometheus_files(plan, topology.pool, str(prometheus_dir)).items():
        (prometheus_dir / name).write_text(text, encoding="utf-8")


def _prepare(plan: Plan, topology: Topology, run_dir: Path) -> RunState:
    (run_dir / LOG_DIR).mkdir(parents=True, exist_ok=True)
    write_config_files(plan, topology, run_dir)
    coordinator = plan.component("coordinator")
    pool = [c for c in plan.components if c.kind == "kv_pool"]
    state = RunState(
        job_id=plan.job_id,
        run_dir=str(run_dir),
        config_dir=plan.config_dir,
        created_at=time.time(),
        token=secrets.token_urlsafe(32),
        controller_url=plan.controller_url,
        coordinator_url=plan.coordinator_url,
        coordinator_mgmt_url=f"{coordinator.probe('readiness').scheme}://{LOCAL_HOST}:{coordinator.ports['mgmt']}",
        pool_metrics_url=f"http://{LOCAL_HOST}:{pool[0].ports['metrics']}/metrics" if pool else None,
        mgmt_tls=plan.mgmt_tls,
        model_base=str(Path.cwd()),  # what `with_local_model_paths` resolved against
    )
    write_job(run_dir, job_from_plan(plan, run_dir))
    write_state(state)
    return state


def current_state(run_dir: Path) -> RunState | None:
    """state.json as last written (None when missing or unreadable)."""
    try:
        return read_state(run_dir)
    except (OSError, ValidationError):
        return None


def _start_supervisor(run_dir: Path, progress: Progress, began: float) -> None:
    """Start the job supervisor; it detaches (the started process exits 0 once it forked) and records itself
    in state.json."""
    log = run_dir / LOG_DIR / SUPERVISOR_LOG
    argv = [sys.executable, "-m", "motor.deploy.local.job_supervisor", "--run-dir", str(run_dir)]
    try:
        launcher = spawn(argv, cwd=run_dir, log=LogFile(log, banner="job supervisor starting"))
    except OSError as exc:
        raise DeployError(f"cannot start the job supervisor ({argv[0]}): {exc}") from exc
    code = launcher.popen.wait(timeout=LAUNCH_TIMEOUT_S)
    if code != 0:
        raise DeployError(f"the job supervisor could not start (exit code {code})", log=log)
    deadline = time.monotonic() + LAUNCH_TIMEOUT_S
    while (state := current_state(run_dir)) is None or state.supervisor is None:
        if time.monotonic() > deadline:
            raise DeployError(
                f"the job supervisor did not record itself within {LAUNCH_TIMEOUT_S:.0f} s", log=log
            )
        time.sleep(POLL_S)
    progress(SupervisorStarted(time.monotonic() - began, state.supervisor.pid, state.supervisor.log))


def _follow_start(run_dir: Path, progress: Progress, began: float, components: int) -> None:
    """Report each component as the supervisor reports it started, until it runs the job or failed."""
    shown: set[str] = set()
    deadline = time.monotonic() + STARTUP_TIMEOUT_S * (components + 1)
    while True:
        state = current_state(run_dir)
        supervisor = state.supervisor if state is not None else None
        if state is None or supervisor is None:
            raise DeployError(f"{run_dir}/state.json vanished while the job was starting")
        for record in state.components:
            if record.ready_at is not None and record.name not in shown:
                shown.add(record.name)
                seconds = record.ready_at - time.time() + time.monotonic() - began
                progress(ComponentStarted(seconds, record.name, record.pid, dict(record.ports)))
        if supervisor.phase == "failed":
            log = Path(supervisor.error_log) if supervisor.error_log else None
            raise DeployError(supervisor.error or "the job supervisor failed to start the job", log=log)
        if supervisor.phase == "running":
            return
        if not Identity(supervisor.pid, supervisor.start_ticks).alive():
            raise DeployError("the job supervisor exited while starting the job", log=Path(supervisor.log))
        if time.monotonic() > deadline:
            raise DeployError("the job supervisor did not start the job in time", log=Path(supervisor.log))
        time.sleep(POLL_S)


def wait_ready(
    state: RunState,
    expected: set[str],
    progress: Progress,
    began: float,
    timeout: float,
    *,
    absent: frozenset[str] = frozenset(),
) -> None:
    """Until the coordinator is ready, every instance in `expected` is active and none in `absent` is
    registered, reporting each change; DeployError when the supervisor is gone, gave up on a component, or
    `timeout` passes."""
    deadline = time.monotonic() + timeout
    shown = ""
    while True:
        _check_supervised(current_state(Path(state.run_dir)) or state)
        views = _views(state)
        _check_crash_loops(views, expected, Path(state.run_dir))
        instances = {v.instance.id: f"{v.instance.status} (engine {v.engine_state})" for v in views}
        readiness = Readiness(
            time.monotonic() - began,
            {name: instances.get(name) for name in sorted(expected)},
            sorted(absent & instances.keys()),
            _coordinator_ready(state),
        )
        summary = readiness.summary
        if summary != shown:
            progress(readiness)
            shown = summary
        active = all(instances.get(name, "").startswith("active") for name in expected)
        if readiness.coordinator_ready and active and not readiness.leaving:
            return
        if time.monotonic() > deadline:
            waiting = sorted(n for n in expected if not instances.get(n, "").startswith("active"))
            engine_logs = [Path(state.run_dir) / name / "engine.log" for name in waiting]
            tails = "\n".join(f"--- {log} ---\n{tail(log, 15)}" for log in engine_logs)
            raise DeployError(
                f"not ready within {timeout:.0f} s ({summary}); engine logs of the instances not active:\n{tails}"
            )
        time.sleep(POLL_S * 3)


def _check_supervised(state: RunState) -> None:
    supervisor = state.supervisor
    if supervisor is None or not Identity(supervisor.pid, supervisor.start_ticks).alive():
        log = Path(supervisor.log) if supervisor is not None else None
        raise DeployError("the job supervisor is gone", log=log)
    for record in state.components:
        if record.state == "given_up":
            raise DeployError(
                f"{record.name} keeps failing: the supervisor gave up restarting it after {record.restarts} "
                "restarts",
                log=Path(record.log),
            )


def _views(state: RunState) -> list[InstanceView]:
    """The instances as the controller sees them (none while it does not answer)."""
    answer = http_status(
        f"{state.controller_url}/controller/instances", tls=state.mgmt_tls, headers=bearer(state.token)
    )
    if answer is None or answer[0] != 200:
        return []
    try:
        return ControllerState.model_validate_json(answer[1]).instances
    except ValidationError:
        return []


def _check_crash_loops(views: list[InstanceView], expected: set[str], run_dir: Path) -> None:
    """An expected instance whose engine keeps exiting during its start fails the deploy now, with the reason,
    instead of at the timeout."""
    for view in views:
        if view.instance.id in expected and view.engine_state == "crash_looping":
            raise DeployError(
                f"{view.instance.id}: its engine keeps exiting during its start (crash loop, "
                f"{view.engine_restarts} restart(s) so far): {view.engine_failure or 'no reason reported'}",
                log=run_dir / view.instance.id / "engine.log",
            )


def _coordinator_ready(state: RunState) -> bool:
    answer = http_status(f"{state.coordinator_mgmt_url}/readiness", tls=state.mgmt_tls)
    if answer is None or answer[0] != 200:
        return False
    try:
        return bool(json.loads(answer[1]).get("ready"))
    except ValueError:
        return False


def _deployed(plan: Plan, topology: Topology, state: RunState, run_root: Path, seconds: float) -> Deployed:
    model = next(
        (c.spec.model_name for c in plan.node_managers if isinstance(c.spec, NodeManagerSpec)), "<model>"
    )
    return Deployed(
        job_id=plan.job_id,
        run_root=run_root,
        instances=[c.name for c in plan.node_managers],
        profile=topology.profile.profile.value,
        endpoint=plan.coordinator_url,
        model=model,
        logs=Path(state.run_dir) / LOG_DIR,
        prometheus_config=Path(state.run_dir) / PROMETHEUS_DIR / CONFIG_FILE,
        seconds=seconds,
    )
