import asyncio

import pytest
from pydantic import ValidationError

from motor.engine.sim.faults import FaultInjector, Faults


def injector(**faults: object) -> tuple[FaultInjector, list[int]]:
    crashes: list[int] = []
    return FaultInjector(Faults(**faults), seed=0, on_crash=crashes.append), crashes


def test_partial_updates_keep_the_other_faults() -> None:
    faults, _ = injector(kv_corrupt=True)
    updated = faults.update({"slowdown": 3})
    assert updated.kv_corrupt and updated.slowdown == 3
    assert faults.update({"kv_corrupt": False}).slowdown == 3


@pytest.mark.parametrize(
    "change", [{"slow_down": 2}, {"slowdown": 0}, {"error_rate": 2}, {"crash_after": 0}, {"hang": "x"}]
)
def test_bad_updates_are_refused_and_change_nothing(change: dict[str, object]) -> None:
    faults, _ = injector()
    with pytest.raises(ValidationError):
        faults.update(change)
    assert faults.faults == Faults()


def test_crash_fires_once_after_n_completions_counted_from_arming() -> None:
    faults, crashes = injector()
    faults.request_completed()
    faults.update({"crash_after": 2})
    faults.request_completed()
    assert crashes == []
    faults.request_completed()
    faults.request_completed()
    assert crashes == [2]


def test_error_rate_extremes() -> None:
    faults, _ = injector(error_rate=1.0)
    assert all(faults.draw_error() for _ in range(100))
    faults.update({"error_rate": 0.0})
    assert not any(faults.draw_error() for _ in range(100))
    faults.update({"error_rate": 0.5})
    assert 20 < sum(faults.draw_error() for _ in range(100)) < 80


async def test_hang_holds_requests_until_cleared() -> None:
    faults, _ = injector(hang=True)
    held = asyncio.ensure_future(faults.hold_while_hanging())
    for _ in range(5):
        await asyncio.sleep(0)
    assert not held.done()
    faults.update({"hang": False})
    await asyncio.wait_for(held, 1.0)
    await asyncio.wait_for(faults.hold_while_hanging(), 1.0)
