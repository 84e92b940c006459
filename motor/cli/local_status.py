"""`motor status [--watch]` of a local job: the local backend's `JobView` as rich tables (components, instances,
traffic, pool, the planner's targets and decisions); `--watch` redraws them in place every interval. Exit code 0 when every component runs and
answers its probe, else 1."""

import sys
import time
from collections import Counter
from pathlib import Path
from typing import TextIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from motor.cli.failures import EXIT_FAILED, report_failure
from motor.deploy import local
from motor.deploy.errors import DeployError
from motor.deploy.local.status import JobView
from motor.observability.traffic import Traffic
from motor.pool.metrics import PoolSnapshot
from motor.protocol.controller import ControllerState
from motor.protocol.planner import PlannerStatus

DEFAULT_WATCH_INTERVAL_S = 2.0
CONSOLE_WIDTH = 160


def status(run_root: Path, job_id: str | None, *, out: TextIO | None = None) -> int:
    """Print the job's state (every job under `run_root` when `job_id` is None)."""
    out = out or sys.stdout
    console = _console(out)
    if job_id is None:
        jobs = local.deployed_jobs(run_root)
        if not jobs:
            console.print(f"no local jobs in {Path(run_root).resolve()} (deploy one with `motor deploy`)")
            return EXIT_FAILED
        return max(status(run_root, job, out=out) for job in jobs)
    try:
        state = local.running_job(run_root, job_id)
    except DeployError as exc:
        return report_failure(exc, "motor status")
    view = local.look(state, None)
    console.print(render(view))
    return _exit_code(view)


def watch(
    run_root: Path,
    job_id: str | None,
    *,
    interval: float = DEFAULT_WATCH_INTERVAL_S,
    out: TextIO | None = None,
    frames: int | None = None,
) -> int:
    """Redraw the status every `interval` s until Ctrl-C (or `frames` frames); traffic is per interval."""
    console = _console(out or sys.stdout)
    try:
        state = local.running_job(run_root, job_id)
    except DeployError as exc:
        return report_failure(exc, "motor status --watch")
    view = local.look(state, None)
    shown = 1
    try:
        if console.is_terminal:
            with Live(render(view), console=console, auto_refresh=False) as live:
                while frames is None or shown < frames:
                    time.sleep(interval)
                    view = local.look(state, view.sample)
                    live.update(render(view), refresh=True)
                    shown += 1
        else:  # a pipe or a file: one frame after the other
            console.print(render(view))
            while frames is None or shown < frames:
                time.sleep(interval)
                view = local.look(state, view.sample)
                console.print(Text(), render(view))
                shown += 1
    except KeyboardInterrupt:
        pass
    return _exit_code(view)


def _exit_code(view: JobView) -> int:
    return 0 if view.healthy else EXIT_FAILED


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
    for component in view.components:
        ports = " ".join(f"{name}={port}" for name, port in component.ports.items())
        components.add_row(
            component.name,
            component.kind,
            str(component.pid),
            ports,
            component.condition,
            str(component.restarts),
        )
    parts.append(components)
    open_circuits = view.traffic.open_circuits if isinstance(view.traffic, Traffic) else None
    parts += _render_instances(view.controller, open_circuits)
    parts.append(_render_traffic(view.traffic))
    parts.append(_render_pool(view.pool))
    if view.planner is not None:
        parts += _render_planner(view.planner)
    return Group(*parts)


# ---- rendering --------------------------------------------------------------------------------------------


def _console(out: TextIO) -> Console:
    terminal = out.isatty()
    return Console(
        file=out, width=None if terminal else CONSOLE_WIDTH, highlight=False, soft_wrap=not terminal
    )


def _table(*columns: str, title: str | None = None) -> Table:
    return Table(*columns, box=None, title=title, title_justify="left", header_style="bold", pad_edge=False)


def _render_instances(
    controller: ControllerState | str, open_circuits: frozenset[str] | None
) -> list[RenderableType]:
    """`open_circuits`: from the coordinator's metrics (None: not scraped)."""
    if isinstance(controller, str):
        return [Text(f"instances: {controller}")]
    per_role = _table("ROLE", "INITIAL", "ACTIVE", "INACTIVE", title="instances per role and status")
    counts = Counter((view.instance.role, view.instance.status) for view in controller.instances)
    for role in sorted({role for role, _ in counts}):
        per_role.add_row(role, *(str(counts[(role, status)]) for status in ("initial", "active", "inactive")))
    rows = _table("INSTANCE", "ROLE", "STATUS", "ENGINE", "RESTARTS", "LAST HEARTBEAT", "CIRCUIT", "ENDPOINT")
    for view in controller.instances:
        circuit = "-" if open_circuits is None else "open" if view.instance.id in open_circuits else "closed"
        rows.add_row(
            view.instance.id,
            view.instance.role,
            view.instance.status,
            view.engine_state,
            str(view.engine_restarts),
            f"{view.seconds_since_heartbeat:.1f} s ago",
            circuit,
            view.instance.endpoints[0].base_url,
        )
    if not controller.instances:
        rows.add_row("(none registered)", "", "", "", "", "", "", "")
    parts: list[RenderableType] = [per_role, rows]
    for view in controller.instances:
        if view.engine_failure:
            parts.append(Text(f"{view.instance.id}: {view.engine_failure}", style="red"))
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


PLANNER_DECISIONS_SHOWN = 5


def _render_planner(planner: PlannerStatus | str) -> list[RenderableType]:
    if isinstance(planner, str):
        return [Text(f"planner: {planner}")]
    line = (
        f"planner: targets {_role_counts(planner.targets)} (runs {_role_counts(planner.counts)}, "
        f"active {_role_counts(planner.active)})"
    )
    if planner.applying:
        line += f"; carrying out {planner.applying}"
    parts: list[RenderableType] = [Text(line)]
    if planner.interrupted:
        parts.append(Text(f"planner: a change was not finished when it last stopped: {planner.interrupted}"))
    decisions = _table("AGO", "DECISION", "TARGETS", "REASON", title="the planner's latest decisions")
    now = time.time()
    for decision in planner.decisions[:PLANNER_DECISIONS_SHOWN]:
        decisions.add_row(
            f"{now - decision.at:.0f} s", decision.kind, _role_counts(decision.targets), decision.reason
        )
    parts.append(decisions)
    return parts


def _role_counts(counts: dict[str, int]) -> str:
    return f"{counts.get('prefill', 0)}P+{counts.get('decode', 0)}D"


def _milliseconds(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f} ms"


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"
