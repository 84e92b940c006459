"""The engine as a child process in its own process group, stopped as a whole."""

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> Callable[[], None] | None:
    """A pre-exec hook asking Linux to SIGTERM the child when this wrapper dies, even by SIGKILL."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)

    return hook


class EngineProcess:
    def __init__(self, command: Sequence[str], env: dict[str, str]) -> None:
        if not command:
            raise ValueError("no engine command given: pass it after `--`")
        self.process = subprocess.Popen(
            list(command), env=env, start_new_session=True, preexec_fn=_die_with_parent()
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def exit_code(self) -> int | None:
        return self.process.poll()

    def signal_group(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signum)

    def stop(self, timeout_s: float) -> int:
        """SIGTERM the whole group, SIGKILL it after `timeout_s`; return the engine's exit code."""
        self.signal_group(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while self.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        return self.reap()

    def reap(self) -> int:
        """Kill whatever is left of the group (the engine's own workers) and return the engine's exit code."""
        self.signal_group(signal.SIGKILL)
        return self.process.wait(timeout=10)


def shell_exit_code(returncode: int) -> int:
    """A Popen return code as a shell reports it: death by signal N → 128 + N."""
    return 128 - returncode if returncode < 0 else returncode
