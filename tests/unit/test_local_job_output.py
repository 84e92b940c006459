"""The lines `motor deploy/stop` print for the local backend's progress events, results and failures, and the
exit codes the CLI picks for the failures."""

from pathlib import Path

import pytest

from motor.cli.failures import report_failure
from motor.cli.local_job import progress_line, ready_text, update_text
from motor.deploy.errors import DeployError, Refused, UpdateFailed, UsageError
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
from motor.deploy.local.results import Deployed, Unchanged, Updated


@pytest.mark.parametrize(
    ("event", "line"),
    [
        (Deploying("demo", "/runs/demo"), "deploying job demo locally (run directory /runs/demo)"),
        (
            SupervisorStarted(0.25, 41, "/runs/demo/logs/supervisor.log"),
            "  [   0.2s] job supervisor running, pid 41 (log /runs/demo/logs/supervisor.log)",
        ),
        (
            ComponentStarted(1.5, "kv-pool", 42, {"rpc": 50088, "metrics": 9003}),
            "  [   1.5s] started kv-pool      pid 42      rpc=50088 metrics=9003",
        ),
        (
            Readiness(3.0, {"decode-0": None, "prefill-0": "active (engine ready)"}, ["prefill-1"], False),
            "  [   3.0s] decode-0 not registered, prefill-0 active (engine ready); still registered: prefill-1; "
            "coordinator not ready",
        ),
        (
            Updating("demo", True, ["motor_deploy_config.p_instances_num"]),
            "scaling local job demo (motor_deploy_config.p_instances_num)",
        ),
        (Updating("demo", False, ["a", "b"]), "updating local job demo (a, b)"),
        (UpdateStep(12.0, "draining prefill-1"), "  [  12.0s] draining prefill-1"),
        (StoppingStarted(), "stopping what was started"),
        (StoppingJob("demo", "/runs/demo"), "stopping local job demo (/runs/demo)"),
        (AskingSupervisor(41), "  asking the job supervisor (pid 41) to stop the components"),
        (KillingSupervisor(41, 130.0), "  the job supervisor did not exit within 130 s: killing it"),
        (SupervisorStopped(["prefill-0", "decode-0"]), "  the supervisor stopped prefill-0, decode-0"),
        (SupervisorGone(41), "  the job supervisor (pid 41) is gone: stopping the recorded processes"),
        (Stopping(["controller"]), "  stopping controller"),
    ],
)
def test_every_progress_event_has_its_line(event: Event, line: str) -> None:
    assert progress_line(event) == line


def test_the_ready_text_says_where_to_send_requests_and_how_to_stop() -> None:
    deployed = Deployed(
        job_id="demo",
        run_root=Path("/runs"),
        instances=["prefill-0", "decode-0"],
        profile="prefill_first",
        endpoint="http://127.0.0.1:1025",
        model="sim",
        logs=Path("/runs/demo/logs"),
        prometheus_config=Path("/runs/demo/prometheus/prometheus.yml"),
        seconds=4.25,
    )
    lines = ready_text(deployed).splitlines()
    assert lines[0] == "ready in 4.2 s: 2 instance(s) active, dispatch profile prefill_first"
    assert lines[1] == "  endpoint: http://127.0.0.1:1025/v1  (OpenAI API)"
    assert '"model": "sim"' in lines[2]
    assert lines[-1] == "  stop:     motor stop --job-id demo --run-root /runs"


def test_update_texts() -> None:
    assert update_text(Unchanged(True, Path("/runs/demo"))) == (
        "nothing to scale: the instance counts equal the running job's (/runs/demo)"
    )
    scaled = Updated("demo", True, {"prefill": 2, "decode": 1}, [], [], 3.0)
    assert update_text(scaled) == "scaled job demo to 2 prefill, 1 decode in 3.0 s"
    updated = Updated("demo", False, {}, [], ["prefill-0"], 1.0)
    assert update_text(updated) == (
        "updated job demo in 1.0 s; restarted: nothing\ntakes effect when they next restart: prefill-0"
    )


def test_failures_are_printed_with_the_command_and_pick_the_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert report_failure(UsageError("local jobs in /runs: a, b; give --job-id"), "motor logs") == 2
    assert capsys.readouterr().err == "motor logs: local jobs in /runs: a, b; give --job-id\n"

    refused = Refused(
        "refused: it only changes x:", details=["a.b", "c"], hint="change instance counts with Y"
    )
    assert report_failure(refused, "motor deploy --update-config", program="motor deploy") == 1
    assert capsys.readouterr().err.splitlines() == [
        "motor deploy --update-config: refused: it only changes x:",
        "  a.b",
        "  c",
        "motor deploy: change instance counts with Y",
    ]

    log = tmp_path / "controller.log"
    log.write_text("starting\ncannot reach etcd\n")
    failed = DeployError("controller exited while starting", log=log)
    log.write_text("overwritten after the failure\n")  # the tail is the one read when it failed
    assert report_failure(failed, "motor deploy") == 1
    assert capsys.readouterr().err.splitlines() == [
        "motor deploy: controller exited while starting",
        f"--- last lines of {log} ---",
        "starting",
        "cannot reach etcd",
        "---",
    ]

    assert report_failure(UpdateFailed("the job supervisor is gone", job_id="demo"), "motor deploy X") == 1
    assert "`motor status --job-id demo`; the deployed config stays the baseline" in capsys.readouterr().err
