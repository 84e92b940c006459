"""What `motor deploy/stop/logs` show for a local job: the local backend's progress events, results and
failures as text, and the exit codes. Progress and results go to `out` (stdout), failures to stderr."""

import json
import sys
from pathlib import Path
from typing import TextIO, assert_never

from motor.cli.failures import report_failure
from motor.config import Topology
from motor.deploy import local
from motor.deploy.errors import DeployError
from motor.deploy.local.deploy import READY_TIMEOUT_S
from motor.deploy.local.events import (
    AskingSupervisor,
    ComponentStarted,
    Deploying,
    Event,
    KillingSupervisor,
    Readiness,
    Stopping,
    StoppingJob,
    StoppingStarted,
    SupervisorGone,
    SupervisorStarted,
    SupervisorStopped,
    UpdateStep,
    Updating,
)
from motor.deploy.local.results import Deployed, NothingToStop, Unchanged, Updated
from motor.deploy.local.update import SCALE, UPDATE
from motor.deploy.plan import Plan


class ProgressPrinter:
    """The `Progress` of a local operation: one line per event."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def __call__(self, event: Event) -> None:
        print(progress_line(event), file=self.out)


def progress_line(event: Event) -> str:
    match event:
        case Deploying(job_id, run_dir):
            return f"deploying job {job_id} locally (run directory {run_dir})"
        case SupervisorStarted(seconds, pid, log):
            return f"  [{seconds:6.1f}s] job supervisor running, pid {pid} (log {log})"
        case ComponentStarted(seconds, name, pid, ports):
            return f"  [{seconds:6.1f}s] started {name:<12} pid {pid:<7} {_ports(ports)}"
        case Readiness(seconds):
            return f"  [{seconds:6.1f}s] {event.summary}"
        case Updating(job_id, scale, changed):
            return f"{'scaling' if scale else 'updating'} local job {job_id} ({', '.join(changed)})"
        case UpdateStep(seconds, step):
            return f"  [{seconds:6.1f}s] {step}"
        case StoppingStarted():
            return "stopping what was started"
        case StoppingJob(job_id, run_dir):
            return f"stopping local job {job_id} ({run_dir})"
        case AskingSupervisor(pid):
            return f"  asking the job supervisor (pid {pid}) to stop the components"
        case KillingSupervisor(_pid, grace_s):
            return f"  the job supervisor did not exit within {grace_s:.0f} s: killing it"
        case SupervisorStopped(names):
            return f"  the supervisor stopped {', '.join(names)}"
        case SupervisorGone(pid):
            return f"  the job supervisor (pid {pid}) is gone: stopping the recorded processes"
        case Stopping(names):
            return f"  stopping {', '.join(names)}"
        case _:
            assert_never(event)


def _ports(ports: dict[str, int]) -> str:
    return " ".join(f"{name}={port}" for name, port in ports.items())


def deploy(
    plan: Plan,
    topology: Topology,
    run_root: Path,
    *,
    ready_timeout: float = READY_TIMEOUT_S,
    out: TextIO | None = None,
) -> int:
    out = out or sys.stdout
    try:
        deployed = local.deploy_local(
            plan, topology, run_root, ready_timeout=ready_timeout, progress=ProgressPrinter(out)
        )
    except DeployError as exc:
        return report_failure(exc, "motor deploy")
    print(ready_text(deployed), file=out)
    return 0


def ready_text(deployed: Deployed) -> str:
    body = json.dumps(
        {"model": deployed.model, "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 32}
    )
    where = f"--job-id {deployed.job_id} --run-root {deployed.run_root}"
    return (
        f"ready in {deployed.seconds:.1f} s: {len(deployed.instances)} instance(s) active, "
        f"dispatch profile {deployed.profile}\n"
        f"  endpoint: {deployed.endpoint}/v1  (OpenAI API)\n"
        f"  try:      curl {deployed.endpoint}/v1/chat/completions -H 'Content-Type: application/json' "
        f"-d '{body}'\n"
        f"  logs:     {deployed.logs}\n"
        f"  metrics:  prometheus --config.file={deployed.prometheus_config}\n"
        f"  status:   motor status {where}\n"
        f"  stop:     motor stop {where}"
    )


def update(
    topology: Topology,
    run_root: Path,
    *,
    scale: bool,
    ready_timeout: float = READY_TIMEOUT_S,
    out: TextIO | None = None,
) -> int:
    """`motor deploy --update-instance-num` (`scale`) or `--update-config` of a running local job."""
    out = out or sys.stdout
    try:
        result = local.update_local(
            topology, run_root, scale=scale, ready_timeout=ready_timeout, progress=ProgressPrinter(out)
        )
    except DeployError as exc:
        return report_failure(exc, f"motor deploy {SCALE if scale else UPDATE}", program="motor deploy")
    print(update_text(result), file=out)
    return 0


def update_text(result: Updated | Unchanged) -> str:
    if isinstance(result, Unchanged):
        what = "the instance counts equal" if result.scale else "the config equals"
        return (
            f"nothing to {'scale' if result.scale else 'update'}: {what} the running job's ({result.run_dir})"
        )
    if result.scale:
        counts = ", ".join(f"{count} {role}" for role, count in result.instances_per_role.items())
        text = f"scaled job {result.job_id} to {counts} in {result.seconds:.1f} s"
    else:
        restarted = ", ".join(result.restarted) or "nothing"
        text = f"updated job {result.job_id} in {result.seconds:.1f} s; restarted: {restarted}"
    if result.waiting:
        text += f"\ntakes effect when they next restart: {', '.join(result.waiting)}"
    return text


def stop(run_root: Path, job_id: str | None, *, out: TextIO | None = None) -> int:
    """`motor stop` of a local job (the only one under `run_root` when `job_id` is None)."""
    out = out or sys.stdout
    try:
        result = local.stop_local(run_root, job_id, progress=ProgressPrinter(out))
    except DeployError as exc:
        return report_failure(exc, "motor stop")
    if isinstance(result, NothingToStop):
        if result.job_id is None:
            print(f"motor stop: nothing to stop: no local jobs in {result.where}", file=out)
        else:
            print(f"motor stop: nothing to stop: no local job {result.job_id!r} in {result.where}", file=out)
    else:
        print(f"stopped: {result.components} component(s); logs kept in {result.logs}", file=out)
    return 0


def logs(
    run_root: Path,
    job_id: str | None,
    component: str,
    *,
    lines: int = 50,
    follow: bool = False,
    engine: bool = False,
    out: TextIO | None = None,
    follow_for_s: float | None = None,
) -> int:
    """`motor logs`: the last `lines` lines of a component's log; with `follow`, what is appended until Ctrl-C
    (or for `follow_for_s` seconds)."""
    out = out or sys.stdout
    try:
        path = local.component_log(run_root, job_id, component, engine=engine)
    except DeployError as exc:
        return report_failure(exc, "motor logs")
    try:
        for text in local.log_text(path, lines, follow=follow, follow_for_s=follow_for_s):
            out.write(text)
            out.flush()
    except FileNotFoundError:
        print(f"motor logs: {path} does not exist (yet)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0
