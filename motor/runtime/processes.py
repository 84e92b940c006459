"""Process groups we start, recognise later and stop as a whole.

- `spawn` starts a child as the leader of its own process group (a new session), optionally asking the
  kernel to SIGTERM it when this process dies, even by SIGKILL (die-with-parent).
- `Identity` is a pid plus the process's start time (/proc/<pid>/stat, in clock ticks since boot): it tells
  the process we started from a later one that got the same pid, from any process that reads it back.
- Stopping is SIGTERM to the group, a grace period for the leader to exit, then SIGKILL to the whole group
  (workers of the leader may outlive it). `Child.stop`/`stop_all` do it for children of this process,
  `stop_groups` for groups known only by their `Identity` (e.g. started by an earlier `motor deploy`).
- Grace periods nest: a process that stops its own child waits that child's grace first, so whoever stops
  it must wait longer. They are derived from one another with `grace_around`, never copied.
"""

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from motor.runtime.logs import LogFile

STOP_MARGIN_S = 5.0  # what a parent needs beyond its child's grace to reap it and exit itself
KILL_WAIT_S = 10.0  # how long a SIGKILLed group may take to vanish


def grace_around(child_grace_s: float, margin_s: float = STOP_MARGIN_S) -> float:
    """The grace to give a process that, when told to stop, first stops a child with `child_grace_s`."""
    return child_grace_s + margin_s


ENGINE_GRACE_S = 20.0  # the engine server → its engine (vLLM drains requests and frees its workers)
ENGINE_SERVER_GRACE_S = grace_around(ENGINE_GRACE_S)  # the node manager → its engine server
NODE_MANAGER_GRACE_S = grace_around(ENGINE_SERVER_GRACE_S)  # a deployer → a node manager
DEPLOY_GRACE_S = NODE_MANAGER_GRACE_S  # `motor stop` → any component: the node manager nests deepest

_PR_SET_PDEATHSIG = 1


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state first), None when there is no such pid."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_ticks(pid: int) -> int | None:
    """When the live process `pid` started (clock ticks since boot); None if there is none (or a zombie)."""
    fields = _stat(pid)
    return int(fields[19]) if fields and fields[0] != "Z" else None


@dataclass(frozen=True)
class Identity:
    """One process for its lifetime: its pid and its start time."""

    pid: int
    start_ticks: int

    def alive(self) -> bool:
        """True while this very process (not a later one with a reused pid) runs."""
        return start_ticks(self.pid) == self.start_ticks

    def group(self) -> list[int]:
        """Live members of the process group this process leads: the leader if still alive, and processes of
        the group started after it (a group id stays taken while it has members, so they are ours even after
        the leader died)."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            fields = _stat(pid)
            if fields is None or fields[0] == "Z" or int(fields[2]) != self.pid:
                continue
            ticks = int(fields[19])
            if ticks < self.start_ticks or (pid == self.pid and ticks != self.start_ticks):
                continue  # older than our leader, or a stranger that got the leader's pid
            found.append(pid)
        return found


def _signal(pid: int, signum: int, *, group: bool) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if group:
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)


def _die_with_parent() -> Callable[[], None] | None:
    """A pre-exec hook asking Linux to SIGTERM the child when this process dies; None where prctl is missing."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the request took effect
            os.kill(os.getpid(), signal.SIGTERM)

    return hook


class Child:
    """A process this process started (see `spawn`)."""

    def __init__(self, popen: subprocess.Popen[bytes], *, leads_group: bool) -> None:
        self.popen = popen
        self.leads_group = leads_group
        fields = _stat(popen.pid)
        self.identity = Identity(popen.pid, int(fields[19]) if fields else 0)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def exit_code(self) -> int | None:
        """None while it runs."""
        return self.popen.poll()

    @property
    def running(self) -> bool:
        return self.popen.poll() is None

    def signal(self, signum: int) -> None:
        """Signal its group (or only it, when it shares ours)."""
        if self.leads_group:
            _signal(self.pid, signum, group=True)
        elif self.popen.poll() is None:  # once reaped, its pid may be someone else's
            _signal(self.pid, signum, group=False)

    def stop(self, grace_s: float) -> int:
        """SIGTERM, SIGKILL after `grace_s`; its exit code."""
        (code,) = stop_all([self], grace_s)
        return code

    def kill(self) -> int:
        """SIGKILL whatever is left (of its group), reap it and return its exit code."""
        self.signal(signal.SIGKILL)
        return self.popen.wait(timeout=KILL_WAIT_S)


def spawn(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    log: LogFile | None = None,
    own_group: bool = True,
    die_with_parent: bool = False,
    pass_fds: Sequence[int] = (),
) -> Child:
    """Start `argv` with stdin from /dev/null and stdout+stderr to `log` (else ours).

    `env` is the child's whole environment (None: ours). `own_group`: lead a new session, so that the child
    and everything it starts is stopped as one. `die_with_parent`: the kernel SIGTERMs the child when the
    thread that spawned it ends, so spawn from a thread that lives as long as the process (not a worker
    thread). Raises OSError when `argv[0]` cannot be executed.
    """
    output = log.open() if log is not None else None
    try:
        popen = subprocess.Popen(
            list(argv),
            env=dict(env) if env is not None else None,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT if output is not None else None,
            start_new_session=own_group,
            preexec_fn=_die_with_parent() if die_with_parent else None,
            pass_fds=tuple(pass_fds),
        )
    finally:
        if output is not None:
            output.close()
    return Child(popen, leads_group=own_group)


def stop_all(children: Sequence[Child], grace_s: float) -> list[int]:
    """SIGTERM every child at once, give them `grace_s` together, then SIGKILL what is left of each (group
    members included); their exit codes, in order."""
    for child in children:
        child.signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for child in children:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
    return [child.kill() for child in children]


def stop_groups(identities: Iterable[Identity], grace_s: float = DEPLOY_GRACE_S) -> list[int]:
    """Like `stop_all`, for process groups known by their leader's `Identity` (not necessarily our
    children); returns the pids still alive after SIGKILL (none, normally)."""
    identities = list(identities)
    for identity in identities:
        if identity.group():
            _signal(identity.pid, signal.SIGTERM, group=True)
    _wait_for_groups(identities, grace_s, poll_s=0.1)
    for identity in identities:
        for pid in identity.group():
            _signal(pid, signal.SIGKILL, group=False)
    _wait_for_groups(identities, KILL_WAIT_S, poll_s=0.05)
    return [pid for identity in identities for pid in identity.group()]


def _wait_for_groups(identities: list[Identity], timeout_s: float, *, poll_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while any(identity.group() for identity in identities) and time.monotonic() < deadline:
        time.sleep(poll_s)


def shell_exit_code(returncode: int) -> int:
    """A Popen return code as a shell reports it: death by signal N → 128 + N."""
    return 128 - returncode if returncode < 0 else returncode
