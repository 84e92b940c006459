"""Start components in their own process groups, recognise them later by pid + start time, stop them."""

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

STOP_GRACE_S = 30.0  # a node manager may take 25 s to stop its engine
KILL_WAIT_S = 5.0


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state first), None for no such live process."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else fields


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None if there is no such (live) process."""
    fields = _stat(pid)
    return int(fields[19]) if fields else None


@dataclass(frozen=True)
class Identity:
    """A process we started as the leader of its own process group."""

    pid: int
    start_ticks: int

    def alive(self) -> bool:
        """True while this very process (not a later one with a reused pid) runs."""
        return start_ticks(self.pid) == self.start_ticks

    def group(self) -> list[int]:
        """Live members of its process group: the leader if still alive, and processes of the group started
        after it (a group id stays taken while it has members, so they are ours even after the leader died)."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            fields = _stat(pid)
            if fields is None or int(fields[2]) != self.pid or int(fields[19]) < self.start_ticks:
                continue
            if pid == self.pid and int(fields[19]) != self.start_ticks:
                continue  # a stranger that got the leader's pid
            found.append(pid)
        return found


def spawn(
    argv: list[str], env: dict[str, str], log_path: Path, cwd: Path
) -> tuple[subprocess.Popen[bytes], int]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            argv,
            env={**os.environ, **env},
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return process, start_ticks(process.pid) or 0


def stop_groups(identities: list[Identity], grace: float = STOP_GRACE_S) -> list[int]:
    """SIGTERM the groups of these processes, SIGKILL whatever of them is left after `grace`; returns the pids
    still alive after that (none, normally)."""
    for identity in identities:
        if identity.group():
            _signal(identity.pid, signal.SIGTERM, group=True)
    deadline = time.monotonic() + grace
    while any(identity.group() for identity in identities) and time.monotonic() < deadline:
        time.sleep(0.1)
    for identity in identities:
        for pid in identity.group():
            _signal(pid, signal.SIGKILL, group=False)
    deadline = time.monotonic() + KILL_WAIT_S
    while any(identity.group() for identity in identities) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [pid for identity in identities for pid in identity.group()]


def _signal(pid: int, signum: signal.Signals, *, group: bool) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if group:
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        # as servers do: connections in TIME_WAIT from an earlier run do not block the port
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def http_status(url: str, timeout: float = 2.0) -> tuple[int, bytes] | None:
    """(status, body) of a GET, or None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"(no log: {exc})"
    return "\n".join(text.splitlines()[-lines:])
