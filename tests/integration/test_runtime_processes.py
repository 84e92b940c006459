"""Process groups with real `python -c` children: group stop, grace then SIGKILL, die-with-parent, identity."""

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from motor.runtime.logs import LogFile, tail
from motor.runtime.processes import (
    Child,
    Identity,
    spawn,
    start_ticks,
    stop_all,
    stop_groups,
)

REPO = Path(__file__).resolve().parents[2]

# Starts a grandchild in the same group, prints its pid, then waits (optionally ignoring SIGTERM).
WITH_GRANDCHILD = """
import signal, subprocess, sys, time
if sys.argv[1] == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(grandchild.pid, flush=True)
time.sleep(600)
"""
EXIT_3_ON_SIGTERM = """
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))
print("ready", flush=True)
time.sleep(600)
"""


def alive(pid: int) -> bool:
    return start_ticks(pid) is not None


def wait_until(condition, timeout_s: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def first_line(path: Path) -> str:
    wait_until(lambda: path.exists() and path.read_text().endswith("\n"))
    return path.read_text().splitlines()[0]


@pytest.fixture
def started() -> Iterator[list[Child]]:
    """Children a test starts; whatever is left of them is killed afterwards."""
    children: list[Child] = []
    yield children
    for child in children:
        child.kill()


def test_stop_kills_the_whole_group_after_the_grace(tmp_path: Path, started: list[Child]) -> None:
    log = tmp_path / "stubborn.log"
    child = spawn([sys.executable, "-c", WITH_GRANDCHILD, "stubborn"], log=LogFile(log))
    started.append(child)
    grandchild = int(first_line(log))
    assert os.getpgid(grandchild) == child.pid  # the child leads its own group

    began = time.monotonic()
    code = child.stop(grace_s=0.5)

    assert code == -signal.SIGKILL  # SIGTERM was ignored: SIGKILL after the grace
    assert time.monotonic() - began >= 0.5
    wait_until(lambda: not alive(grandchild))


def test_a_child_that_exits_on_sigterm_gives_its_own_exit_code(tmp_path: Path, started: list[Child]) -> None:
    log = tmp_path / "polite.log"
    child = spawn([sys.executable, "-c", EXIT_3_ON_SIGTERM], log=LogFile(log))
    started.append(child)
    assert first_line(log) == "ready"

    assert child.running and child.exit_code() is None
    assert child.stop(grace_s=30.0) == 3
    assert not child.running and child.exit_code() == 3


def test_stop_all_terminates_children_together(tmp_path: Path, started: list[Child]) -> None:
    logs = [tmp_path / f"{i}.log" for i in range(3)]
    children = [spawn([sys.executable, "-c", EXIT_3_ON_SIGTERM], log=LogFile(log)) for log in logs]
    started.extend(children)
    for log in logs:
        assert first_line(log) == "ready"

    assert stop_all(children, grace_s=30.0) == [3, 3, 3]


def test_a_child_sharing_our_group_is_signalled_alone(started: list[Child]) -> None:
    child = spawn([sys.executable, "-c", "import time; time.sleep(600)"], own_group=False)
    started.append(child)

    assert os.getpgid(child.pid) == os.getpgid(0)
    assert child.stop(grace_s=5.0) == -signal.SIGTERM  # we are still here: only the child got it


def test_die_with_parent_takes_the_child_along_even_on_sigkill(tmp_path: Path) -> None:
    survivors = []
    for die_with_parent in (True, False):
        log = tmp_path / f"parent-{die_with_parent}.log"
        parent_code = (
            "import sys, time\n"
            "from motor.runtime.processes import spawn\n"
            "child = spawn([sys.executable, '-c', 'import time; time.sleep(600)'],"
            f" die_with_parent={die_with_parent})\n"
            "print(child.pid, flush=True)\n"
            "time.sleep(600)\n"
        )
        with log.open("wb") as output:
            parent = subprocess.Popen(
                [sys.executable, "-c", parent_code],
                stdout=output,
                env={**os.environ, "PYTHONPATH": str(REPO)},
            )
        child_pid = int(first_line(log))
        identity = Identity(child_pid, start_ticks(child_pid) or 0)
        parent.kill()
        parent.wait()
        if die_with_parent:
            wait_until(lambda identity=identity: not identity.alive())
        else:
            time.sleep(0.5)  # give a SIGTERM that should not come the time to arrive
            survivors.append(identity)
    assert [identity.alive() for identity in survivors] == [True]
    assert stop_groups(survivors, grace_s=5.0) == []


def test_identity_tells_our_process_from_one_that_reused_its_pid(
    tmp_path: Path, started: list[Child]
) -> None:
    log = tmp_path / "group.log"
    child = spawn([sys.executable, "-c", WITH_GRANDCHILD, "polite"], log=LogFile(log))
    started.append(child)
    grandchild = int(first_line(log))
    ours = child.identity

    assert ours.alive() and ours.start_ticks == start_ticks(child.pid)
    assert sorted(ours.group()) == sorted([child.pid, grandchild])
    # The same pid with another start time is what a stranger that got the pid after ours looks like.
    stranger = Identity(child.pid, ours.start_ticks + 1)
    assert not stranger.alive()
    assert child.pid not in stranger.group()

    assert stop_groups([ours], grace_s=10.0) == []
    assert not ours.alive() and ours.group() == []
    assert child.popen.wait(timeout=5) == -signal.SIGTERM


def test_a_missing_program_raises_and_output_goes_to_the_log(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        spawn([str(tmp_path / "no-such-program")])

    log = tmp_path / "out.log"
    child = spawn(
        [sys.executable, "-c", "import sys; print('to stdout'); sys.exit('to stderr')"], log=LogFile(log)
    )
    assert child.popen.wait(timeout=30) == 1
    assert tail(log).splitlines() == ["to stdout", "to stderr"]
