"""`motor status` for deploy_mode local: components, instances (from the controller) and pool usage."""

import json
import sys
import time
import urllib.request
from pathlib import Path
from typing import TextIO

from pydantic import ValidationError

from motor.deploy.local.probes import http_status
from motor.deploy.local.state import RunState, deployed_jobs, job_dir, read_state
from motor.pool.metrics import MetricsUnavailable, scrape_pool
from motor.protocol.controller import ControllerState, bearer
from motor.runtime.processes import Identity


def status_local(run_root: Path, job_id: str | None, *, out: TextIO | None = None) -> int:
    """Print the job's state (every job under `run_root` when `job_id` is None); 0 when every component runs
    and answers its probe, 1 otherwise."""
    out = out or sys.stdout
    if job_id is None:
        jobs = deployed_jobs(run_root)
        if not jobs:
            print(f"no local jobs in {Path(run_root).resolve()} (deploy one with `motor deploy`)", file=out)
            return 1
        codes = []
        for job in jobs:
            codes.append(status_local(run_root, job, out=out))
            print(file=out)
        return max(codes)
    run_dir = job_dir(run_root, job_id)
    try:
        state = read_state(run_dir)
    except (OSError, ValidationError) as exc:
        print(f"motor status: cannot read {run_dir}/state.json: {exc}", file=sys.stderr)
        return 1
    if state is None:
        print(f"no local job {job_id!r} in {run_dir.parent} (deploy it with `motor deploy`)", file=out)
        return 1
    uptime = time.time() - state.created_at
    print(f"job {job_id} (local, run directory {run_dir}, deployed {uptime:.0f} s ago)", file=out)
    healthy = _components(state, out)
    _instances(state, out)
    _pool(state, out)
    return 0 if healthy else 1


def _components(state: RunState, out: TextIO) -> bool:
    rows = [("COMPONENT", "KIND", "PID", "PORTS", "STATE")]
    healthy = True
    for record in state.components:
        ports = " ".join(f"{name}={port}" for name, port in record.ports.items())
        if not Identity(record.pid, record.start_ticks).alive():
            condition, healthy = "exited", False
        else:
            answer = http_status(record.probe_url)
            condition = "running" if answer is not None and answer[0] == 200 else "running, probe failing"
            healthy = healthy and condition == "running"
        if record.kind == "coordinator" and condition == "running":
            condition += _coordinator_detail(state)
        rows.append((record.name, record.kind, str(record.pid), ports, condition))
    _table(rows, out)
    return healthy


def _coordinator_detail(state: RunState) -> str:
    answer = http_status(f"{state.coordinator_mgmt_url}/readiness")
    if answer is None:
        return ""
    try:
        body = json.loads(answer[1])
    except ValueError:
        return ""
    return f" (ready: {str(body.get('ready')).lower()}, serving: {body.get('serving')})"


def _instances(state: RunState, out: TextIO) -> None:
    request = urllib.request.Request(
        f"{state.controller_url}/controller/instances", headers=bearer(state.token)
    )
    try:
        with urllib.request.urlopen(request, timeout=2.0) as response:
            controller = ControllerState.model_validate_json(response.read())
    except (OSError, ValidationError) as exc:
        print(f"\ninstances: the controller at {state.controller_url} does not answer ({exc})", file=out)
        return
    print(file=out)
    rows = [("INSTANCE", "ROLE", "STATUS", "ENGINE", "RESTARTS", "LAST HEARTBEAT", "ENDPOINT")]
    for view in controller.instances:
        endpoint = view.instance.endpoints[0]
        rows.append(
            (
                view.instance.id,
                view.instance.role,
                view.instance.status,
                view.engine_state,
                str(view.engine_restarts),
                f"{view.seconds_since_heartbeat:.1f} s ago",
                endpoint.base_url,
            )
        )
    if len(rows) == 1:
        rows.append(("(none registered)", "", "", "", "", "", ""))
    _table(rows, out)
    for link in controller.coordinators:
        if link.pending:
            print(
                f"coordinator {link.url}: instance changes pending ({link.last_error or 'in flight'})",
                file=out,
            )


def _pool(state: RunState, out: TextIO) -> None:
    if state.pool_metrics_url is None:
        print("\nKV pool: off", file=out)
        return
    try:
        pool = scrape_pool(state.pool_metrics_url)
    except (MetricsUnavailable, OSError, ValueError) as exc:
        print(f"\nKV pool: metrics unavailable at {state.pool_metrics_url} ({exc})", file=out)
        return
    print(
        f"\nKV pool: {_mib(pool.allocated_bytes)} of {_mib(pool.capacity_bytes)} used ({pool.used_ratio:.1%}), "
        f"{pool.key_count} keys, {pool.active_clients} clients, "
        f"{pool.put_requests} puts, {pool.get_hits}/{pool.get_requests} get hits, {pool.evicted_keys} evicted",
        file=out,
    )


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"


def _table(rows: list[tuple[str, ...]], out: TextIO) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip(), file=out
        )
