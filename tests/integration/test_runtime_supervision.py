"""A supervised child with real `python -c` processes and short policies: restart with backoff, restart when
unhealthy, give up past the budget, stop."""

import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path

from motor.runtime.backoff import Backoff
from motor.runtime.logs import LogFile
from motor.runtime.processes import Child, spawn
from motor.runtime.supervision import ChildState, Health, RestartPolicy, SupervisedChild

QUICK = RestartPolicy(backoff=Backoff(initial_s=0.01, cap_s=0.05), stop_grace_s=5.0, poll_s=0.02)


async def wait_until(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


class Starts:
    """Starts `code` and remembers every child it started."""

    def __init__(self, code: str, log: Path) -> None:
        self.code = code
        self.log = log
        self.children: list[Child] = []

    def __call__(self) -> Child:
        child = spawn([sys.executable, "-c", self.code], log=LogFile(self.log))
        self.children.append(child)
        return child


async def test_an_exiting_child_is_restarted_until_the_budget_is_spent(tmp_path: Path) -> None:
    starts = Starts("import sys; sys.exit(3)", tmp_path / "crash.log")
    states: list[ChildState] = []
    exited: list[int | None] = []
    policy = RestartPolicy(
        backoff=Backoff(initial_s=0.0), stop_grace_s=5.0, max_restarts=2, window_s=60.0, poll_s=0.02
    )
    supervised = SupervisedChild(
        "crasher", starts, policy, on_change=states.append, on_exit=lambda c: exited.append(c.exit_code())
    )

    task = supervised.start()
    await asyncio.wait_for(task, 30)

    assert supervised.state == "given_up" and supervised.restarts == 2
    assert len(starts.children) == 3 and exited == [3, 3, 3]
    # Without a probe a child is healthy while it runs: whether a poll saw it alive before it exited is chance.
    seen = [state for state in states if state != "healthy"]
    assert seen == ["restarting", "starting", "restarting", "starting", "restarting", "given_up"]
    await supervised.stop()
    assert supervised.state == "stopped"


async def test_a_child_unhealthy_too_long_is_restarted_and_healthy_resets_the_backoff(tmp_path: Path) -> None:
    starts = Starts("import time; time.sleep(600)", tmp_path / "sleeper.log")
    answers: dict[int, Health | None] = {}

    async def probe() -> Health | None:
        return answers.get(len(starts.children))

    answers[1] = "unhealthy"
    policy = RestartPolicy(
        backoff=Backoff(initial_s=0.01, cap_s=0.05), stop_grace_s=5.0, unhealthy_restart_s=0.1, poll_s=0.02
    )
    supervised = SupervisedChild("sleeper", starts, policy, probe=probe)
    supervised.start()
    try:
        await wait_until(lambda: supervised.restarts == 1)
        first = starts.children[0]
        assert not first.running and first.exit_code() is not None  # stopped before the restart
        assert supervised.state == "starting" and supervised._failures == 1  # no answer yet: starting

        answers[2] = "healthy"
        await wait_until(lambda: supervised.state == "healthy")
        assert supervised._failures == 0 and supervised.pid == starts.children[1].pid
    finally:
        await supervised.stop()
    assert supervised.state == "stopped" and not starts.children[1].running


async def test_no_answer_after_being_healthy_counts_as_unhealthy(tmp_path: Path) -> None:
    starts = Starts("import time; time.sleep(600)", tmp_path / "quiet.log")
    answer: list[Health | None] = ["healthy"]

    async def probe() -> Health | None:
        return answer[0]

    supervised = SupervisedChild("quiet", starts, QUICK, probe=probe)
    supervised.start()
    try:
        await wait_until(lambda: supervised.state == "healthy")
        answer[0] = None
        await wait_until(lambda: supervised.state == "unhealthy")
        assert supervised.restarts == 0  # QUICK never restarts for unhealthiness
    finally:
        await supervised.stop()


async def test_launch_raises_when_the_child_cannot_start(tmp_path: Path) -> None:
    def cannot_start() -> Child:
        return spawn([str(tmp_path / "missing")])

    supervised = SupervisedChild("missing", cannot_start, QUICK)
    try:
        await supervised.launch()
    except OSError:
        pass
    else:
        raise AssertionError("launch did not raise")
    assert supervised.child is None


async def test_a_child_never_healthy_after_its_start_is_restarted_and_cleaned_up_first(
    tmp_path: Path,
) -> None:
    starts = Starts("import time; time.sleep(600)", tmp_path / "silent.log")
    cleaned: list[int] = []

    async def probe() -> Health | None:
        return None  # never answers

    async def clean_up(child: Child) -> None:
        await asyncio.sleep(0.01)  # awaited before the restart
        cleaned.append(child.pid)

    policy = RestartPolicy(
        backoff=Backoff(initial_s=0.01), stop_grace_s=5.0, startup_timeout_s=0.2, poll_s=0.02
    )
    supervised = SupervisedChild("silent", starts, policy, probe=probe, on_exit=clean_up)
    supervised.start()
    try:
        await wait_until(lambda: supervised.restarts == 1)
        assert cleaned == [starts.children[0].pid] and not starts.children[0].running
        assert supervised.state == "starting" and supervised.pid == starts.children[1].pid
    finally:
        await supervised.stop()


async def test_a_healthy_child_survives_a_few_unanswered_probes_but_not_an_unhealthy_answer(
    tmp_path: Path,
) -> None:
    starts = Starts("import time; time.sleep(600)", tmp_path / "busy.log")
    script: list[Health | None] = ["healthy", None, None, "healthy", None, None, None, "healthy", "unhealthy"]
    seen: list[tuple[Health | None, ChildState]] = []

    async def probe() -> Health | None:
        answer = script[len(seen)] if len(seen) < len(script) else "healthy"
        seen.append((answer, supervised.state))
        return answer

    policy = RestartPolicy(
        backoff=Backoff(initial_s=0.01), stop_grace_s=5.0, poll_s=0.02, unanswered_probes_allowed=2
    )
    states: list[ChildState] = []
    supervised = SupervisedChild("busy", starts, policy, probe=probe, on_change=states.append)
    supervised.start()
    try:
        await wait_until(lambda: len(seen) > len(script))
        # The state each probe found: two unanswered probes in a row are tolerated, the third is not; an
        # "unhealthy" answer counts at once; a healthy answer restores it.
        found = [state for _, state in seen]
        assert found == [
            "starting",
            "healthy",
            "healthy",
            "healthy",
            "healthy",
            "healthy",
            "healthy",
            "unhealthy",
            "healthy",
            "unhealthy",
        ]
        assert states == ["healthy", "unhealthy", "healthy", "unhealthy", "healthy"]
        assert supervised.restarts == 0
    finally:
        await supervised.stop()


async def test_exits_before_healthy_are_counted_until_the_child_is_healthy(tmp_path: Path) -> None:
    """A crash loop: starts that end before any probe said healthy; a healthy start clears the count."""
    marker = tmp_path / "healthy-now"
    starts = Starts(
        f"import pathlib, sys, time\nif not pathlib.Path({str(marker)!r}).exists(): sys.exit(7)\ntime.sleep(600)",
        tmp_path / "looping.log",
    )

    async def probe() -> Health | None:
        return "healthy" if marker.exists() and supervised.running else "starting"

    supervised = SupervisedChild("looper", starts, QUICK, probe=probe)
    supervised.start()
    try:
        await wait_until(lambda: supervised.exits_before_healthy >= 3)
        assert supervised.last_exit_code == 7
        marker.write_text("")
        await wait_until(lambda: supervised.state == "healthy")
        assert supervised.exits_before_healthy == 0 and supervised.last_exit_code == 7
    finally:
        await supervised.stop()
