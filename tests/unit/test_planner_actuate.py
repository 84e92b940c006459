"""How the planner carries a decision out (motor/planner/actuate.py) and what its journal tells a restarted
planner (motor/planner/journal.py)."""

from pathlib import Path

import pytest

from motor.config.models import PlannerConfig
from motor.config.planner import planner_bounds
from motor.planner.actuate import scale_steps
from motor.planner.journal import Journal, changes, interrupted, recent_changes

BOUNDS = planner_bounds(PlannerConfig(enable=True, max_instances=8), {"prefill": 0, "decode": 0})


def counts(prefill: int, decode: int) -> dict[str, int]:
    return {"prefill": prefill, "decode": decode}


@pytest.mark.parametrize(
    ("current", "target", "steps"),
    [
        ((2, 2), (2, 4), [(2, 4)]),  # growth: one step
        ((3, 3), (1, 1), [(1, 1)]),  # shrinking: one step, drained by the backend
        ((4, 2), (2, 4), [(4, 4), (2, 4)]),  # room in the budget: add first, then drain the others
        ((4, 4), (2, 6), [(2, 4), (2, 6)]),  # a full budget: drain-remove first, then add (conversion)
        ((5, 3), (6, 2), [(5, 2), (6, 2)]),
        ((2, 2), (2, 2), []),
    ],
)
def test_add_first_drain_before_removing_within_the_budget(
    current: tuple[int, int], target: tuple[int, int], steps: list[tuple[int, int]]
) -> None:
    planned = scale_steps(counts(*current), counts(*target), BOUNDS)  # type: ignore[arg-type]
    assert [(step["prefill"], step["decode"]) for step in planned] == steps
    assert all(BOUNDS.within_budget(step) for step in planned)


def test_the_journal_gives_a_restarted_planner_its_last_minute_and_an_unfinished_change(
    tmp_path: Path,
) -> None:
    journal = Journal(tmp_path / "planner")
    journal.write(
        "change", kind="scale", targets=counts(1, 3), reason="decode needs 2.5", **{"from": counts(1, 1)}
    )
    journal.write("done", targets=counts(1, 3), seconds=[3.4])
    journal.write(
        "change", kind="convert", targets=counts(2, 2), reason="prefill needs 1.6", **{"from": counts(1, 3)}
    )
    with journal.path.open("a") as handle:
        handle.write('{"at": 1, "event": "st')  # a line cut short by a kill
    entries = journal.entries()
    assert len(entries) == 3
    now = entries[-1]["at"] + 1
    assert recent_changes(entries, now) == (entries[0]["at"], entries[2]["at"])
    assert recent_changes(entries, now + 120) == ()
    assert interrupted(entries).startswith("to 2P+2D (from 1P+3D)")
    assert [view.kind for view in changes(entries)] == ["convert", "scale"]
    journal.write("failed", targets=counts(2, 2), error="no room")
    assert interrupted(journal.entries()) is None
