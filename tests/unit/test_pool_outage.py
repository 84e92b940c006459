"""The store client's outage breaker, on a fake clock and a fake port check."""

import pytest

from motor.kvstore.client import _guarded
from motor.kvstore.errors import RPC_FAIL, StoreError, StoreUnavailable
from motor.kvstore.outage import MasterOutage
from motor.runtime.backoff import Backoff

LOOKS = Backoff(initial_s=1.0, factor=2.0, cap_s=4.0)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def breaker(reachable: list[bool]) -> tuple[MasterOutage, Clock, list[float]]:
    """A breaker whose port check answers `reachable[0]` (mutable) and records when it looked."""
    clock = Clock()
    looks: list[float] = []

    def look() -> bool:
        looks.append(clock.now)
        return reachable[0]

    return MasterOutage(look, probe_backoff=LOOKS, clock=clock), clock, looks


def test_calls_go_through_while_the_master_answers() -> None:
    outage, _, looks = breaker([True])
    assert all(outage.admit() for _ in range(5))
    outage.succeeded()
    assert not outage.down and not outage.skip_now() and looks == []
    assert outage.view().up and outage.view().outages == 0


def test_an_outage_refuses_calls_without_looking_until_a_look_is_due() -> None:
    reachable = [False]
    outage, clock, looks = breaker(reachable)
    outage.failed()
    assert outage.down and outage.skip_now()
    assert [outage.admit() for _ in range(3)] == [False, False, False]
    assert looks == []  # no look before the first backoff (1 s) passed

    clock.now += 1.0
    assert not outage.skip_now()
    assert not outage.admit()  # looked: still refused
    assert looks == [101.0]
    clock.now += 1.5  # the next look is 2 s after the previous one
    assert not outage.admit() and looks == [101.0]
    clock.now += 0.5
    assert not outage.admit() and looks == [101.0, 103.0]
    view = outage.view()
    assert not view.up and view.outages == 1 and view.refused_calls == 6 and view.down_seconds == 3.0


def test_looks_back_off_to_the_cap() -> None:
    outage, clock, looks = breaker([False])
    outage.failed()
    for _ in range(6):
        clock.now += 10.0  # always due
        outage.admit()
    gaps = []
    clock.now = looks[-1]
    for _ in range(3):
        before = len(looks)
        while len(looks) == before:
            clock.now += 0.5
            outage.admit()
        gaps.append(looks[-1] - looks[-2])
    assert gaps == [4.0, 4.0, 4.0]


def test_one_trial_once_the_port_accepts_and_its_success_ends_the_outage() -> None:
    reachable = [False]
    outage, clock, _ = breaker(reachable)
    outage.failed()
    clock.now += 1.0
    reachable[0] = True
    assert outage.admit()  # the trial
    assert outage.skip_now() and not outage.admit()  # others wait while the trial runs
    clock.now += 0.5
    outage.succeeded()
    assert not outage.down and outage.admit()
    view = outage.view()
    assert view.up and view.outages == 1 and view.down_seconds == 1.5


def test_a_failed_trial_keeps_the_outage_and_backs_off() -> None:
    reachable = [True]
    outage, clock, looks = breaker(reachable)
    outage.failed()
    clock.now += 1.0
    assert outage.admit()
    outage.failed()  # the master listens but does not serve yet
    assert outage.down and outage.view().outages == 1
    clock.now += 1.0
    assert not outage.admit() and len(looks) == 1  # next look 2 s after the trial
    clock.now += 1.0
    assert outage.admit() and len(looks) == 2


def test_a_second_outage_is_counted_and_its_looks_start_soon_again() -> None:
    reachable = [False]
    outage, clock, looks = breaker(reachable)
    outage.failed()
    for _ in range(4):
        clock.now += 10.0
        outage.admit()
    reachable[0] = True
    clock.now += 10.0
    assert outage.admit()
    outage.succeeded()
    reachable[0] = False
    outage.failed()
    clock.now += 1.0
    outage.admit()
    assert looks[-1] == clock.now  # first look 1 s into the new outage, not at the old cap
    assert outage.view().outages == 2


def test_a_trial_that_ends_inconclusive_lets_the_next_look_try_again() -> None:
    # the master restarted: its port accepts, but the trial's stale connection broke (an error that is not
    # "unavailable"); the breaker must not stay shut for good
    outage, clock, looks = breaker([True])
    outage.failed()
    clock.now += 1.0
    assert outage.admit()
    outage.inconclusive()
    assert outage.down and outage.skip_now()
    clock.now += 2.0
    assert outage.admit() and len(looks) == 2
    outage.succeeded()
    assert outage.view().up


def test_inconclusive_while_up_changes_nothing() -> None:
    outage, _, looks = breaker([True])
    outage.inconclusive()
    assert not outage.down and outage.admit() and looks == []


class GuardedFake:
    """The two attributes `_guarded` uses, and a call whose outcome the test sets."""

    master_address = "127.0.0.1:1"

    def __init__(self, outage: MasterOutage) -> None:
        self._outage = outage
        self.outcome: BaseException | None = None

    @_guarded
    def call(self) -> str:
        if self.outcome is not None:
            raise self.outcome
        return "answer"


def test_a_store_error_in_the_trial_call_does_not_shut_the_client_out() -> None:
    outage, clock, _ = breaker([True])
    client = GuardedFake(outage)
    client.outcome = StoreUnavailable("gone", RPC_FAIL)
    with pytest.raises(StoreUnavailable):
        client.call()
    assert outage.down
    clock.now += 1.0
    client.outcome = StoreError("exists_batch: the master could not check 6 keys", -1)
    with pytest.raises(StoreError):
        client.call()  # the trial: the master's port accepts, the stale connection broke
    clock.now += 2.0
    client.outcome = None
    assert client.call() == "answer"
    assert outage.view().up
