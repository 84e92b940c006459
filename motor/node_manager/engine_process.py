"""One engine process tree: started in its own process group, stopped by signalling that group."""

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from motor.protocol.node_manager import EngineProcessRecord

log = logging.getLogger(__name__)

STOP_GRACE_S = 25.0  # longer than the engine server's own SIGTERM → SIGKILL delay (20 s)
_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


@dataclass(frozen=True)
class EngineCommand:
    argv: list[str]
    env: dict[str, str]  # on top of the node manager's own environment
    files: dict[str, str]  # written before every start
    log_path: Path
    pid_path: Path  # an EngineProcessRecord of the running engine


def start_ticks(pid: int) -> int:
    """When `pid` started (clock ticks since boot): with the pid, identifies one process for its lifetime."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[19])


def _terminate_with_parent() -> None:
    """In the child before exec: the kernel SIGTERMs the engine server if the node manager dies, even by
    SIGKILL, so no engine outlives its node manager unsupervised."""
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


class EngineProcess:
    def __init__(self, command: EngineCommand) -> None:
        self._command = command
        self._popen: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen is not None else None

    def start(self) -> int:
        for path, text in self._command.files.items():
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text, encoding="utf-8")
        self._command.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self._command.log_path.open("ab") as log_file:
            log_file.write(f"\n=== engine starting at {time.strftime('%Y-%m-%d %H:%M:%S')} ===\n".encode())
            log_file.flush()
            self._popen = subprocess.Popen(
                self._command.argv,
                env={**os.environ, **self._command.env},
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_terminate_with_parent,
            )
        record = EngineProcessRecord(pid=self._popen.pid, start_ticks=start_ticks(self._popen.pid))
        self._command.pid_path.write_text(record.model_dump_json(), encoding="utf-8")
        log.info("engine started, pid %d: %s", self._popen.pid, " ".join(self._command.argv))
        return self._popen.pid

    def exit_code(self) -> int | None:
        """None while running (or never started)."""
        return self._popen.poll() if self._popen is not None else None

    def running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    async def stop(self, grace: float = STOP_GRACE_S) -> None:
        """SIGTERM the engine's process group, SIGKILL it after `grace` seconds, reap the leader."""
        popen = self._popen
        if popen is None:
            return
        pgid = popen.pid  # the leader of its own session: the group id is its pid
        self._signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while popen.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        # Children may outlive the leader; the group is killed either way.
        self._signal_group(pgid, signal.SIGKILL)
        if popen.poll() is None:
            await asyncio.to_thread(popen.wait, 5.0)
        self._popen = None
        self._command.pid_path.unlink(missing_ok=True)
        log.info("engine pid %d stopped (exit code %s)", pgid, popen.returncode)

    @staticmethod
    def _signal_group(pgid: int, signum: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signum)
