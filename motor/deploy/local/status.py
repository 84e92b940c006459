"""`motor status [--watch]` for deploy_mode local: components, instances (from the controller), traffic (from the
coordinator's metrics) and pool usage, as rich tables; `--watch` redraws them in place every interval."""

import json
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from pydantic import ValidationError
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from motor.deploy.local.probes import http_status
from motor.deploy.local.state import RunState, deployed_jobs, read_state, running_job
from motor.observability.traffic import CoordinatorSample, Traffic, scrape_coordinator, traffic_between
from motor.pool.metrics import MetricsUnavailable, PoolSnapshot, scrape_pool
from motor.protocol.controller import ControllerState, bearer
from motor.runtime.processes import Identity
from motor.runtime.tls import client_context

DEFAULT_WATCH_INTERVAL_S = 2.0
CONSOLE_WIDTH = 160


@dataclass(frozen=True)
class JobView:
    """One look at a running job; `healthy` when every component runs and answers its probe."""

    state: RunState
    supervisor: str  # what the job supervisor is doing, or that it is gone
    components: list[tuple[str, str, str, str, str, str]]
    healthy: bool
    controller: ControllerState | str  # or why it could not be read
    traffic: Traffic | str | None  # None: no scrape yet
    pool: PoolSnapshot | str | None  # None: the job runs no pool
    sample: CoordinatorSample | None


def status_local(run_root: Path, job_id: str | None, *, out: TextIO | None = None) -> int:
    """Print the job's state (every job under `run_root` when `job_id` is None); 0 when every component runs
    and answers its probe, 1 otherwise."""
    out = out or sys.stdout
    console = _console(out)
    if job_id is None:
        jobs = deployed_jobs(run_root)
        if not jobs:
            console.print(f"no local jobs in {Path(run_root).resolve()} (deploy one with `motor deploy`)")
            return 1
        return max(status_local(run_root, job, out=out) for job in jobs)
    state = running_job(run_root, job_id, "motor status")
    if isinstance(state, int):
        return state
    view = look(state, None)
    console.print(render(view))
    return 0 if view.healthy else 1


def watch_local(
    run_root: Path,
    job_id: str | None,
    *,
    interval: float = DEFAULT_WATCH_INTERVAL_S,
    out: TextIO | None = None,
    frames: int | None = None,
) -> int:
    """Redraw the status every `interval` s until Ctrl-C (or `frames` frames); traffic is per interval."""
    console = _console(out or sys.stdout)
    state = running_job(run_root, job_id, "motor status --watch")
    if isinstance(state, int):
        return state
    view = look(state, None)
    shown = 1
    try:
        if console.is_terminal:
            with Live(render(view), console=console, auto_refresh=False) as live:
                while frames is None or shown < frames:
                    time.sleep(interval)
                    view = look(state, view.sample)
                    live.update(render(view), refresh=True)
                    shown += 1
        else:  # a pipe or a file: one frame after the other
            console.print(render(view))
            while frames is None or shown < frames:
                time.sleep(interval)
                view = look(state, view.sample)
                console.print(Text(), render(view))
                shown += 1
    except KeyboardInterrupt:
        pass
    return 0 if view.healthy else 1


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
    )


def render(view: JobView) -> RenderableType:
    state = view.state
    uptime = time.time() - state.created_at
    parts: list[RenderableType] = [
        Text(
            f"job {state.job_id} (local, run directory {state.run_dir}, deployed {uptime:.0f} s ago)",
            style="bold",
        )
    ]
    parts.append(Text(view.supervisor))
    components = _table("COMPONENT", "KIND", "PID", "PORTS", "STATE", "RESTARTS")
    for row in view.components:
        components.add_row(*row)
    parts.append(components)
    parts += _render_instances(view.controller)
    parts.append(_render_traffic(view.traffic))
    parts.append(_render_pool(view.pool))
    return Group(*parts)


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


def _components(state: RunState) -> tuple[list[tuple[str, str, str, str, str, str]], bool]:
    rows = []
    healthy = True
    for record in state.components:
        ports = " ".join(f"{name}={port}" for name, port in record.ports.items())
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
        rows.append((record.name, record.kind, str(record.pid), ports, condition, str(record.restarts)))
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


# ---- rendering --------------------------------------------------------------------------------------------


def _console(out: TextIO) -> Console:
    terminal = out.isatty()
    return Console(
        file=out, width=None if terminal else CONSOLE_WIDTH, highlight=False, soft_wrap=not terminal
    )


def _table(*columns: str, title: str | None = None) -> Table:
    return Table(*columns, box=None, title=title, title_justify="left", header_style="bold", pad_edge=False)


def _render_instances(controller: ControllerState | str) -> list[RenderableType]:
    if isinstance(controller, str):
        return [Text(f"instances: {controller}")]
    per_role = _table("ROLE", "INITIAL", "ACTIVE", "INACTIVE", title="instances per role and status")
    counts = Counter((view.instance.role, view.instance.status) for view in controller.instances)
    for role in sorted({role for role, _ in counts}):
        per_role.add_row(role, *(str(counts[(role, status)]) for status in ("initial", "active", "inactive")))
    rows = _table("INSTANCE", "ROLE", "STATUS", "ENGINE", "RESTARTS", "LAST HEARTBEAT", "ENDPOINT")
    for view in controller.instances:
        rows.add_row(
            view.instance.id,
            view.instance.role,
            view.instance.status,
            view.engine_state,
            str(view.engine_restarts),
            f"{view.seconds_since_heartbeat:.1f} s ago",
            view.instance.endpoints[0].base_url,
        )
    if not controller.instances:
        rows.add_row("(none registered)", "", "", "", "", "", "")
    parts: list[RenderableType] = [per_role, rows]
    for link in controller.coordinators:
        if link.pending:
            parts.append(
                Text(f"coordinator {link.url}: instance changes pending ({link.last_error or 'in flight'})")
            )
    return parts


def _render_traffic(traffic: Traffic | str | None) -> RenderableType:
    if isinstance(traffic, str) or traffic is None:
        return Text(f"traffic: {traffic or 'no scrape yet'}")
    table = _table(
        "WINDOW", "REQUESTS", "REQ/S", "ERRORS", "TTFT P50", "TTFT P99", title="traffic at the coordinator"
    )
    window = f"last {traffic.seconds:.1f} s" if traffic.seconds > 0 else "since start"
    rate = f"{traffic.rate:.1f}" if traffic.seconds > 0 else "-"
    table.add_row(
        window,
        f"{traffic.requests:.0f}",
        rate,
        f"{traffic.errors:.0f}",
        _milliseconds(traffic.ttft_p50),
        _milliseconds(traffic.ttft_p99),
    )
    return table


def _render_pool(pool: PoolSnapshot | str | None) -> RenderableType:
    if pool is None:
        return Text("KV pool: off")
    if isinstance(pool, str):
        return Text(f"KV pool: {pool}")
    return Text(
        f"KV pool: {_mib(pool.allocated_bytes)} of {_mib(pool.capacity_bytes)} used ({pool.used_ratio:.1%}), "
        f"{pool.key_count} keys, {pool.active_clients} clients, "
        f"{pool.put_requests} puts, {pool.get_hits}/{pool.get_requests} get hits, {pool.evicted_keys} evicted"
    )


def _milliseconds(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f} ms"


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"
