"""`motor status [--watch]` for deploy_mode local: one look at a running job — its supervisor, components,
instances (from the controller), traffic (from the coordinator's metrics), pool usage and the planner's targets
and latest decisions — as a `JobView`."""

import json
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from motor.deploy.local.probes import http_status
from motor.deploy.local.state import RunState, read_state
from motor.observability.traffic import CoordinatorSample, Traffic, scrape_coordinator, traffic_between
from motor.pool.metrics import MetricsUnavailable, PoolSnapshot, scrape_pool
from motor.protocol.controller import ControllerState, bearer
from motor.protocol.planner import PlannerStatus
from motor.runtime.processes import Identity
from motor.runtime.tls import client_context


@dataclass(frozen=True)
class ComponentView:
    name: str
    kind: str
    pid: int
    ports: dict[str, int]
    condition: str  # its supervision state, or running (with how its probe and the coordinator answer)
    restarts: int


@dataclass(frozen=True)
class JobView:
    """One look at a running job; `healthy` when every component runs and answers its probe."""

    state: RunState
    supervisor: str  # what the job supervisor is doing, or that it is gone
    components: list[ComponentView]
    healthy: bool
    controller: ControllerState | str  # or why it could not be read
    traffic: Traffic | str | None  # None: no scrape yet
    pool: PoolSnapshot | str | None  # None: the job runs no pool
    sample: CoordinatorSample | None
    planner: PlannerStatus | str | None = None  # None: the job runs no planner


def look(state: RunState, previous: CoordinatorSample | None) -> JobView:
    state = _latest(state)
    supervisor, supervised = _supervisor(state)
    components, healthy = _components(state)
    sample: CoordinatorSample | None = None
    traffic: Traffic | str | None
    try:
        url = f"{state.coordinator_mgmt_url}/metrics"
        context = client_context(state.mgmt_tls) if url.startswith("https:") else None
        sample = scrape_coordinator(url, time.monotonic(), context=context)
        traffic = traffic_between(previous, sample)
    except (OSError, ValueError) as exc:
        traffic = f"the coordinator's metrics at {state.coordinator_mgmt_url}/metrics do not answer ({exc})"
    return JobView(
        state,
        supervisor,
        components,
        healthy and supervised,
        _controller(state),
        traffic,
        _pool(state),
        sample,
        _planner(state),
    )


# ---- collecting -------------------------------------------------------------------------------------------


def _latest(state: RunState) -> RunState:
    """The job's state.json as the supervisor last wrote it (`state` when it cannot be read)."""
    try:
        return read_state(Path(state.run_dir)) or state
    except (OSError, ValidationError):
        return state


def _supervisor(state: RunState) -> tuple[str, bool]:
    """A line about the job supervisor, and whether it supervises the job."""
    supervisor = state.supervisor
    if supervisor is None:
        return "job supervisor: none recorded (components are not restarted)", False
    if not Identity(supervisor.pid, supervisor.start_ticks).alive():
        return (
            f"job supervisor (pid {supervisor.pid}) is GONE: components keep running but are no longer restarted; "
            f"`motor stop` stops them (see {supervisor.log})",
            False,
        )
    uptime = time.time() - supervisor.started_at
    line = f"job supervisor pid {supervisor.pid}: {supervisor.phase} for {uptime:.0f} s"
    update = state.update
    if update is not None:
        line += f"; last update (generation {update.generation}) {update.status}"
        if update.error:
            line += f": {update.error}"
    return line, supervisor.phase == "running"


def _components(state: RunState) -> tuple[list[ComponentView], bool]:
    rows = []
    healthy = True
    for record in state.components:
        if record.state in ("restarting", "given_up", "draining", "stopping", "stopped"):
            condition, healthy = record.state.replace("_", " "), False
        elif not Identity(record.pid, record.start_ticks).alive():
            condition, healthy = "exited", False
        else:
            answer = http_status(record.probe_url, tls=state.mgmt_tls)
            condition = "running" if answer is not None and answer[0] == 200 else "running, probe failing"
            healthy = healthy and condition == "running"
        if record.kind == "coordinator" and condition == "running":
            condition += _coordinator_detail(state)
        rows.append(
            ComponentView(
                record.name, record.kind, record.pid, dict(record.ports), condition, record.restarts
            )
        )
    return rows, healthy


def _coordinator_detail(state: RunState) -> str:
    answer = http_status(f"{state.coordinator_mgmt_url}/readiness", tls=state.mgmt_tls)
    if answer is None:
        return ""
    try:
        body = json.loads(answer[1])
    except ValueError:
        return ""
    return f" (ready: {str(body.get('ready')).lower()}, serving: {body.get('serving')})"


def _controller(state: RunState) -> ControllerState | str:
    answer = http_status(
        f"{state.controller_url}/controller/instances", tls=state.mgmt_tls, headers=bearer(state.token)
    )
    if answer is None or answer[0] != 200:
        reason = "no answer" if answer is None else f"HTTP {answer[0]}"
        return f"the controller at {state.controller_url} does not answer ({reason})"
    try:
        return ControllerState.model_validate_json(answer[1])
    except ValidationError as exc:
        return f"the controller at {state.controller_url} gave an unexpected answer ({exc})"


def _pool(state: RunState) -> PoolSnapshot | str | None:
    if state.pool_metrics_url is None:
        return None
    try:
        return scrape_pool(state.pool_metrics_url)
    except (MetricsUnavailable, OSError, ValueError) as exc:
        return f"metrics unavailable at {state.pool_metrics_url} ({exc})"


def _planner(state: RunState) -> PlannerStatus | str | None:
    record = next((r for r in state.components if r.kind == "planner"), None)
    if record is None:
        return None
    url = f"{'https' if state.mgmt_tls else 'http'}://127.0.0.1:{record.ports['api']}/planner/status"
    answer = http_status(url, tls=state.mgmt_tls)
    if answer is None or answer[0] != 200:
        return (
            f"the planner at {url} does not answer ({'no answer' if answer is None else f'HTTP {answer[0]}'})"
        )
    try:
        return PlannerStatus.model_validate_json(answer[1])
    except ValidationError as exc:
        return f"the planner at {url} gave an unexpected answer ({exc})"
