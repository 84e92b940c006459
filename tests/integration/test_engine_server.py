"""The engine server around a real engine process (motor's simulator, which starts in about a second):
/status follows the engine's /health, signals reach the engine's process group, exit codes come back."""

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from motor.runtime.net import free_local_ports
from tests.fixtures.sim import SIM_ADMIN, SIM_ADMIN_TOKEN, SIM_ADMIN_TOKEN_VAR

WAIT_S = 30.0


class WrappedSim:
    def __init__(self, log_path: Path, *sim_flags: str) -> None:
        self.port, self.status_port = free_local_ports(2)
        argv = [
            sys.executable, "-m", "motor.engine.server",
            "--engine-port", str(self.port),
            "--status-port", str(self.status_port),
            "--probe-interval", "0.2",
            "--failure-threshold", "2",
            "--stop-timeout", "10",
            "--",
            sys.executable, "-m", "motor.engine.sim", "--host", "127.0.0.1", "--port", str(self.port), *sim_flags,
        ]  # fmt: skip
        self.log_path = log_path
        with log_path.open("wb") as log:
            env = {**os.environ, SIM_ADMIN_TOKEN_VAR: SIM_ADMIN_TOKEN}
            self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)

    def status(self) -> str | None:
        try:
            return httpx.get(f"http://127.0.0.1:{self.status_port}/status", timeout=2).json()["status"]
        except httpx.HTTPError:
            return None

    def wait_status(self, wanted: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            if self.status() == wanted:
                return
            assert self.process.poll() is None, f"engine server exited:\n{self.log_path.read_text()}"
            time.sleep(0.1)
        pytest.fail(f"status never became {wanted!r} (last {self.status()!r}):\n{self.log_path.read_text()}")

    def wait_engine_answers(self) -> None:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            try:
                httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2)
                return
            except httpx.HTTPError:
                time.sleep(0.1)
        pytest.fail(f"the engine never answered:\n{self.log_path.read_text()}")

    def set_faults(self, **faults: object) -> None:
        response = httpx.post(
            f"http://127.0.0.1:{self.port}/admin/faults", json=faults, headers=SIM_ADMIN, timeout=5
        )
        assert response.status_code == 200, response.text

    def engine_pid(self) -> int:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            for line in self.log_path.read_text().splitlines():
                if "engine started (pid " in line:
                    return int(line.split("engine started (pid ")[1].split(")")[0])
            time.sleep(0.1)
        pytest.fail("the engine server never logged its engine's pid")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)


@pytest.fixture
def wrapped(tmp_path: Path) -> Iterator[list[WrappedSim]]:
    started: list[WrappedSim] = []
    yield started
    for server in started:
        server.stop()


def process_gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.1)
    return False


def test_status_follows_engine_health(tmp_path: Path, wrapped: list[WrappedSim]) -> None:
    server = WrappedSim(tmp_path / "server.log", "--fault-health-down")
    wrapped.append(server)
    server.wait_status("initial")
    server.wait_engine_answers()
    time.sleep(1.0)  # five probe intervals of an engine whose /health answers 503
    assert server.status() == "initial"

    server.set_faults(health_down=False)
    server.wait_status("normal")
    server.set_faults(health_down=True)
    server.wait_status("abnormal")
    server.set_faults(health_down=False)
    server.wait_status("normal")

    engine = server.engine_pid()
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(timeout=20) in (0, 128 + signal.SIGTERM)
    assert process_gone(engine), "SIGTERM to the engine server must stop the engine"
    assert server.status() is None, "the status port closes with the server"


def test_server_exits_with_the_engine(tmp_path: Path, wrapped: list[WrappedSim]) -> None:
    server = WrappedSim(tmp_path / "server.log")
    wrapped.append(server)
    server.wait_status("normal")
    os.kill(server.engine_pid(), signal.SIGKILL)
    assert server.process.wait(timeout=20) == 128 + signal.SIGKILL
    assert "exited with code" in server.log_path.read_text()


def test_taken_status_port_starts_no_engine(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = free_local_ports(1)[0]
        argv = [
            sys.executable, "-m", "motor.engine.server", "--engine-port", str(port),
            "--status-port", str(taken.getsockname()[1]), "--", sys.executable, "-c", "import time; time.sleep(60)",
        ]  # fmt: skip
        result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert result.returncode != 0
    assert "engine started" not in result.stderr


def test_engine_command_is_required() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "motor.engine.server", "--engine-port", "1", "--status-port", "2"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode == 2
    assert "engine command is missing" in result.stderr
