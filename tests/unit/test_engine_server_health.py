from motor.engine.server.app import child_environment
from motor.engine.server.health import HealthTracker
from motor.runtime.processes import shell_exit_code


def tracker() -> HealthTracker:
    return HealthTracker(failure_threshold=3, startup_timeout_s=60.0, started_at=0.0)


def test_initial_until_first_healthy_probe() -> None:
    health = tracker()
    for second in range(1, 30):
        health.probe_failed(now=second)
    assert health.status == "initial"
    health.probe_succeeded()
    assert health.status == "normal"


def test_abnormal_after_consecutive_failures_and_back() -> None:
    health = tracker()
    health.probe_succeeded()
    health.probe_failed(now=1)
    health.probe_failed(now=2)
    assert health.status == "normal"
    health.probe_succeeded()
    health.probe_failed(now=3)
    health.probe_failed(now=4)
    assert health.status == "normal", "a success resets the count"
    health.probe_failed(now=5)
    assert health.status == "abnormal"
    health.probe_succeeded()
    assert health.status == "normal"


def test_never_healthy_within_startup_timeout_is_abnormal() -> None:
    health = tracker()
    health.probe_failed(now=59)
    assert health.status == "initial"
    health.probe_failed(now=61)
    assert health.status == "abnormal"


def test_exit_is_final() -> None:
    health = tracker()
    health.probe_succeeded()
    health.engine_exited()
    health.probe_succeeded()
    assert health.status == "abnormal"


def test_exit_codes_as_a_shell_reports_them() -> None:
    assert shell_exit_code(0) == 0
    assert shell_exit_code(3) == 3
    assert shell_exit_code(-15) == 143


def test_patch_shim_goes_first_on_the_engine_path() -> None:
    env = child_environment({"PYTHONPATH": "/a:/b"}, apply_patches=True)
    first, *rest = env["PYTHONPATH"].split(":")
    assert first.endswith("_shim")
    assert rest == ["/a", "/b"]
    assert "PYTHONPATH" not in child_environment({}, apply_patches=False)
