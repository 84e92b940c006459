"""The single-container supervisor script, run by a real /bin/sh with stand-in commands for the components."""

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from motor.deploy.k8s.single_container import shared_env, supervisor_script
from motor.deploy.plan import Component, SecretEnv


def component(
    name: str, argv: list[str], run_dir: Path, secret_env: tuple[SecretEnv, ...] = (), **env: str
) -> Component:
    return Component(
        secret_env=secret_env,
        name=name,
        kind="node_manager",
        argv=tuple(argv),
        env={
            "SHARED": "same",
            "MOTOR_ADVERTISE_HOST": "$(POD_IP)",
            "MOTOR_RUN_DIR": str(run_dir / name),
            **env,
        },
        ports={},
        probes=(),
    )


@pytest.fixture
def run(tmp_path: Path):  # type: ignore[no-untyped-def]
    started: list[subprocess.Popen[bytes]] = []

    def start(components: tuple[Component, ...], **container_env: str) -> subprocess.Popen[bytes]:
        shared = shared_env(components)
        env = {
            **os.environ,
            **shared,
            "POD_IP": "10.1.2.3",
            "MOTOR_ADVERTISE_HOST": "10.1.2.3",
            **container_env,
        }
        log = (tmp_path / "supervisor.log").open("wb")
        process = subprocess.Popen(
            ["/bin/sh", "-c", supervisor_script(components, shared)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def test_each_component_gets_its_own_env_and_run_dir(tmp_path: Path, run) -> None:  # type: ignore[no-untyped-def]
    report = 'echo "$SHARED $OWN $MOTOR_ADVERTISE_HOST $MOTOR_RUN_DIR" > "$MOTOR_RUN_DIR/env"; sleep 30'
    components = (
        component("a", ["sh", "-c", report], tmp_path, OWN="value with 'quotes' and $(POD_IP)"),
        component("b", ["sh", "-c", report], tmp_path, OWN="b"),
    )
    process = run(components)
    for name in ("a", "b"):
        target = tmp_path / name / "env"
        for _ in range(100):
            if target.exists() and target.read_text().endswith("\n"):
                break
            process.wait(timeout=0.1) if process.poll() is not None else subprocess.run(
                ["sleep", "0.1"], check=True
            )
    assert (
        tmp_path / "a" / "env"
    ).read_text() == f"same value with 'quotes' and 10.1.2.3 10.1.2.3 {tmp_path / 'a'}\n"
    assert (tmp_path / "b" / "env").read_text() == f"same b 10.1.2.3 {tmp_path / 'b'}\n"
    assert process.poll() is None
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=10) == 0


def test_one_component_exiting_stops_the_others_and_fails(tmp_path: Path, run) -> None:  # type: ignore[no-untyped-def]
    components = (
        component("long", ["sh", "-c", 'echo $$ > "$MOTOR_RUN_DIR/pid"; exec sleep 60'], tmp_path),
        component("short", ["sh", "-c", "sleep 0.5; exit 3"], tmp_path),
    )
    process = run(components)
    assert process.wait(timeout=20) == 1
    log = (tmp_path / "supervisor.log").read_text()
    assert "motor: short exited; stopping every component" in log
    pid = int((tmp_path / "long" / "pid").read_text())
    wait_for(lambda: not alive(pid))


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_components_do_not_inherit_credentials_they_do_not_use(tmp_path: Path, run) -> None:  # type: ignore[no-untyped-def]
    """The container holds every credential (from Secrets); each component keeps only its own."""
    report = 'echo "${ETCD_PASSWORD_X:-unset} ${API_TOKEN_X:-unset}" > "$MOTOR_RUN_DIR/env"; sleep 30'
    controller = (SecretEnv("ETCD_PASSWORD_X", "motor-credentials", "ETCD_PASSWORD_X"),)
    coordinator = (SecretEnv("API_TOKEN_X", "motor-credentials", "API_TOKEN_X"),)
    components = (
        component("controller", ["sh", "-c", report], tmp_path, controller),
        component("coordinator", ["sh", "-c", report], tmp_path, coordinator),
        component("engine", ["sh", "-c", report], tmp_path),
    )
    process = run(components, ETCD_PASSWORD_X="etcd-secret", API_TOKEN_X="api-secret")
    seen = {}
    for name in ("controller", "coordinator", "engine"):
        target = tmp_path / name / "env"
        wait_for(lambda target=target: target.exists() and target.read_text().endswith("\n"))
        seen[name] = target.read_text().strip()
    assert seen == {
        "controller": "etcd-secret unset",
        "coordinator": "unset api-secret",
        "engine": "unset unset",
    }
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=10) == 0


def test_a_variable_name_the_shell_cannot_take_is_refused(tmp_path: Path) -> None:
    bad = component("a", ["true"], tmp_path, **{"BAD;rm -rf /": "x"})
    with pytest.raises(ValueError, match="not an environment variable name"):
        supervisor_script((bad, component("b", ["true"], tmp_path)), {})
