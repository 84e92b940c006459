"""`motor deploy` for deploy_mode local: run a Plan as processes on this machine and wait until it serves.

Nothing is computed here: the Plan says what to start, with which command, environment and ports. The
backend adds the per-run controller token, writes the config copy and the plan's files, starts the
components in plan order (each in its own process group, one log file each), waits for every startup probe,
then for the coordinator to be ready with every instance active. Any failure stops everything it started.
"""

import dataclasses
import json
import os
import secrets
import sys
import time
from pathlib import Path
from typing import TextIO

from pydantic import ValidationError

from motor.config import Topology
from motor.deploy.local.probes import http_status, port_in_use
from motor.deploy.local.state import (
    LOG_DIR,
    ProcessRecord,
    RunState,
    job_dir,
    read_state,
    remove_state,
    write_state,
)
from motor.deploy.local.stop import stop_recorded
from motor.deploy.plan import LOCAL_HOST, Component, Plan
from motor.deploy.prometheus import CONFIG_FILE, PROMETHEUS_DIR, prometheus_files
from motor.protocol import env as env_names
from motor.protocol.controller import ControllerState, bearer
from motor.protocol.specs import NodeManagerSpec
from motor.runtime.logs import LogFile, tail
from motor.runtime.processes import Identity, spawn

STARTUP_TIMEOUT_S = 60.0
READY_TIMEOUT_S = 600.0
POLL_S = 0.1


class DeployFailed(Exception):
    def __init__(self, message: str, log: Path | None = None) -> None:
        super().__init__(message)
        self.log = log


def deploy_local(
    plan: Plan,
    topology: Topology,
    run_root: Path,
    *,
    ready_timeout: float = READY_TIMEOUT_S,
    out: TextIO | None = None,
) -> int:
    out = out or sys.stdout
    if plan.target != "local":
        print(
            f"motor deploy: the local backend runs local plans; this one targets {plan.target}",
            file=sys.stderr,
        )
        return 2
    run_dir = job_dir(run_root, plan.job_id)
    refusal = _refuse_running(run_dir, plan.job_id, run_root) or _refuse_busy_ports(plan)
    if refusal:
        print(f"motor deploy: {refusal}", file=sys.stderr)
        return 1
    began = time.monotonic()
    print(f"deploying job {plan.job_id} locally (run directory {run_dir})", file=out)
    state = _prepare(plan, topology, run_dir)
    try:
        _start_all(plan, state, out, began)
        _wait_ready(plan, state, out, began, ready_timeout)
    except BaseException as exc:
        if isinstance(exc, DeployFailed):
            print(f"motor deploy: {exc}", file=sys.stderr)
            if exc.log is not None:
                print(f"--- last lines of {exc.log} ---\n{tail(exc.log)}\n---", file=sys.stderr)
        print("stopping what was started", file=out)
        stop_recorded(state, out)
        remove_state(run_dir)
        if not isinstance(exc, DeployFailed):
            raise
        return 1
    _print_ready(plan, topology, state, run_root, time.monotonic() - began, out)
    return 0


def _refuse_running(run_dir: Path, job_id: str, run_root: Path) -> str | None:
    try:
        state = read_state(run_dir)
    except (OSError, ValidationError):
        return None  # unreadable leftovers: overwritten
    if state is None:
        return None
    running = [r.name for r in state.components if Identity(r.pid, r.start_ticks).group()]
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


def _prepare(plan: Plan, topology: Topology, run_dir: Path) -> RunState:
    config_dir = Path(plan.config_dir)
    config_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / LOG_DIR).mkdir(parents=True, exist_ok=True)
    user = topology.user.model_dump(mode="json", exclude_unset=True, by_alias=True)
    env = topology.env.model_dump(mode="json", exclude_unset=True)
    Path(plan.user_config_path).write_text(json.dumps(user, indent=2) + "\n", encoding="utf-8")
    Path(plan.env_config_path).write_text(json.dumps(env, indent=2) + "\n", encoding="utf-8")
    for name, text in plan.files.items():
        (config_dir / name).write_text(text, encoding="utf-8")
    prometheus_dir = run_dir / PROMETHEUS_DIR
    prometheus_dir.mkdir(exist_ok=True)
    for name, text in prometheus_files(plan, topology.pool, str(prometheus_dir)).items():
        (prometheus_dir / name).write_text(text, encoding="utf-8")
    coordinator = plan.component("coordinator")
    pool = [c for c in plan.components if c.kind == "kv_pool"]
    state = RunState(
        job_id=plan.job_id,
        run_dir=str(run_dir),
        config_dir=str(config_dir),
        created_at=time.time(),
        token=secrets.token_urlsafe(32),
        controller_url=plan.controller_url,
        coordinator_url=plan.coordinator_url,
        coordinator_mgmt_url=f"{coordinator.probe('readiness').scheme}://{LOCAL_HOST}:{coordinator.ports['mgmt']}",
        pool_metrics_url=f"http://{LOCAL_HOST}:{pool[0].ports['metrics']}/metrics" if pool else None,
        mgmt_tls=plan.mgmt_tls,
    )
    write_state(state)
    return state


def _start_all(plan: Plan, state: RunState, out: TextIO, began: float) -> None:
    node_managers = []
    for component in plan.components:
        started = _start(component, state)
        if component.kind == "node_manager":
            node_managers.append((component, started))
        else:
            _wait_startup(component, started, state, out, began)
    for component, started in node_managers:
        _wait_startup(component, started, state, out, began)


def _start(component: Component, state: RunState) -> ProcessRecord:
    env = dict(component.env)
    if component.kind in ("controller", "coordinator", "node_manager"):
        env[env_names.CONTROLLER_TOKEN] = state.token
    run_dir = Path(env.get(env_names.RUN_DIR) or Path(state.run_dir) / component.name)
    run_dir.mkdir(parents=True, exist_ok=True)
    log_path = Path(state.run_dir) / LOG_DIR / f"{component.name}.log"
    try:
        process = spawn(component.argv, env={**os.environ, **env}, cwd=run_dir, log=LogFile(log_path))
    except OSError as exc:
        raise DeployFailed(f"cannot start {component.name} ({component.argv[0]}): {exc}") from exc
    record = ProcessRecord(
        name=component.name,
        kind=component.kind,
        pid=process.pid,
        start_ticks=process.identity.start_ticks,
        argv=list(component.argv),
        ports=dict(component.ports),
        log=str(log_path),
        started_at=time.time(),
        probe_url=component.probe_url("liveness", LOCAL_HOST),
    )
    state.components.append(record)
    write_state(state)
    return record


def _wait_startup(
    component: Component, record: ProcessRecord, state: RunState, out: TextIO, began: float
) -> None:
    url = component.probe_url("startup", LOCAL_HOST)
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    identity = Identity(record.pid, record.start_ticks)
    while True:
        answer = http_status(url, timeout=1.0, tls=state.mgmt_tls)
        if answer is not None and answer[0] == 200:
            break
        if not identity.alive():
            raise DeployFailed(f"{component.name} exited while starting", Path(record.log))
        if time.monotonic() > deadline:
            raise DeployFailed(
                f"{component.name} did not answer {url} within {STARTUP_TIMEOUT_S:.0f} s", Path(record.log)
            )
        time.sleep(POLL_S)
    ports = " ".join(f"{name}={port}" for name, port in component.ports.items())
    print(
        f"  [{time.monotonic() - began:6.1f}s] started {component.name:<12} pid {record.pid:<7} {ports}",
        file=out,
    )


def _wait_ready(plan: Plan, state: RunState, out: TextIO, began: float, timeout: float) -> None:
    expected = {c.name for c in plan.node_managers}
    deadline = time.monotonic() + timeout
    shown = ""
    while True:
        for record in state.components:
            if not Identity(record.pid, record.start_ticks).alive():
                raise DeployFailed(f"{record.name} exited before the deployment was ready", Path(record.log))
        instances = _instances(state)
        coordinator_ready = _coordinator_ready(state)
        summary = ", ".join(f"{name} {instances.get(name, 'not registered')}" for name in sorted(expected))
        summary += f"; coordinator {'ready' if coordinator_ready else 'not ready'}"
        if summary != shown:
            print(f"  [{time.monotonic() - began:6.1f}s] {summary}", file=out)
            shown = summary
        if coordinator_ready and all(instances.get(name, "").startswith("active") for name in expected):
            return
        if time.monotonic() > deadline:
            waiting = sorted(n for n in expected if not instances.get(n, "").startswith("active"))
            engine_logs = [Path(state.run_dir) / name / "engine.log" for name in waiting]
            tails = "\n".join(f"--- {log} ---\n{tail(log, 15)}" for log in engine_logs)
            raise DeployFailed(
                f"not ready within {timeout:.0f} s ({summary}); engine logs of the instances not active:\n{tails}"
            )
        time.sleep(POLL_S * 3)


def _instances(state: RunState) -> dict[str, str]:
    """instance id → "status (engine state)" as the controller sees it."""
    answer = http_status(
        f"{state.controller_url}/controller/instances", tls=state.mgmt_tls, headers=bearer(state.token)
    )
    if answer is None or answer[0] != 200:
        return {}
    try:
        views = ControllerState.model_validate_json(answer[1]).instances
    except ValidationError:
        return {}
    return {v.instance.id: f"{v.instance.status} (engine {v.engine_state})" for v in views}


def _coordinator_ready(state: RunState) -> bool:
    answer = http_status(f"{state.coordinator_mgmt_url}/readiness", tls=state.mgmt_tls)
    if answer is None or answer[0] != 200:
        return False
    try:
        return bool(json.loads(answer[1]).get("ready"))
    except ValueError:
        return False


def _print_ready(
    plan: Plan, topology: Topology, state: RunState, run_root: Path, seconds: float, out: TextIO
) -> None:
    model = next(
        (c.spec.model_name for c in plan.node_managers if isinstance(c.spec, NodeManagerSpec)), "<model>"
    )
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 32})
    print(
        f"ready in {seconds:.1f} s: {len(plan.node_managers)} instance(s) active, "
        f"dispatch profile {topology.profile.profile.value}\n"
        f"  endpoint: {plan.coordinator_url}/v1  (OpenAI API)\n"
        f"  try:      curl {plan.coordinator_url}/v1/chat/completions -H 'Content-Type: application/json' "
        f"-d '{body}'\n"
        f"  logs:     {Path(state.run_dir) / LOG_DIR}\n"
        f"  metrics:  prometheus --config.file={Path(state.run_dir) / PROMETHEUS_DIR / CONFIG_FILE}\n"
        f"  status:   motor status --job-id {plan.job_id} --run-root {run_root}\n"
        f"  stop:     motor stop --job-id {plan.job_id} --run-root {run_root}",
        file=out,
    )
