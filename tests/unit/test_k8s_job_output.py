"""The lines `motor deploy/status/stop --k8s` print for the Kubernetes backend's results, and their exit codes."""

import pytest

from motor.cli.k8s_job import show_applied, show_deleted, show_rolled, show_status
from motor.deploy.k8s.apply import ApplyResult
from motor.deploy.k8s.backend import Applied, Deleted, DeploymentRow, Rolled, Status
from motor.deploy.k8s.client import KubeError

INVALID = KubeError("Deployment", "decode-0", 422, "HTTP 422 Invalid")


def test_an_apply_lists_its_objects_or_its_failures(capsys: pytest.CaptureFixture[str]) -> None:
    done = ApplyResult(applied=["ConfigMap/motor-config", "Deployment/prefill-0"], method="create-or-update")
    assert show_applied(Applied("deployed job demo to namespace demo", done)) == 0
    assert capsys.readouterr().out.splitlines() == [
        "deployed job demo to namespace demo: 2 object(s) via create-or-update",
        "  ConfigMap/motor-config",
        "  Deployment/prefill-0",
    ]
    failed = ApplyResult(applied=["ConfigMap/motor-config"], failures=[INVALID], method="create-or-update")
    assert show_applied(Applied("deployed job demo to namespace demo", failed)) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        "motor: failed Deployment/decode-0: HTTP 422 Invalid",
        "motor: 1 object(s) failed, 1 applied via create-or-update",
    ]


def test_a_config_update_says_what_it_rolled_and_what_waits(capsys: pytest.CaptureFixture[str]) -> None:
    rolled = Rolled("0123456789abcdef", ["Deployment/coordinator"], [INVALID], waiting=["a.log_level"])
    assert show_rolled(rolled) == 1
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [
        "  rolled Deployment/coordinator to config revision 0123456789abcdef",
        "takes effect when the engine pods next restart: a.log_level",
    ]
    assert captured.err == "motor: failed Deployment/decode-0: HTTP 422 Invalid\n"
    assert show_rolled(Rolled("0123456789abcdef", restart_pod="demo")) == 0
    assert capsys.readouterr().out == "restart the demo pod to apply the change: every component runs in it\n"


def test_a_delete_lists_what_it_deleted_and_keeps_a_foreign_namespace(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert show_deleted(Deleted("demo", "team", ["Deployment/prefill-0"], [], kept_namespace=True)) == 0
    assert capsys.readouterr().out.splitlines() == [
        "kept Namespace/team: motor did not create it",
        "deleted 1 object(s) of job demo from namespace team",
        "  Deployment/prefill-0",
    ]
    assert show_deleted(Deleted("demo", "team", [], [], kept_namespace=False)) == 0
    assert capsys.readouterr().out == "nothing to delete: no objects of job demo in namespace team\n"


def test_status_is_a_table_and_fails_without_deployments(capsys: pytest.CaptureFixture[str]) -> None:
    rows = [
        DeploymentRow("coordinator", "coordinator", "-", "1/1", "motor:dev"),
        DeploymentRow("prefill-0", "node-manager", "prefill", "0/1", "motor:dev"),
    ]
    assert show_status(Status("demo", "demo", rows)) == 0
    assert capsys.readouterr().out.splitlines() == [
        "job demo in namespace demo:",
        "  NAME         COMPONENT     ROLE     READY  IMAGE",
        "  coordinator  coordinator   -        1/1    motor:dev",
        "  prefill-0    node-manager  prefill  0/1    motor:dev",
    ]
    assert show_status(Status("demo", "demo", [])) == 1
    assert capsys.readouterr().out == "no deployment of job demo in namespace demo\n"
