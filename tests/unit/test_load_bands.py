"""Load bands (motor/coordinator/scheduling/load_bands.py): bands follow load order, and the least loaded member
of any group is the one a look at every member finds, as loads move and slots change."""

import random

from motor.coordinator.scheduling.load import EndpointLoad, Pool
from motor.coordinator.scheduling.load_bands import BandedLoadHeap, LoadBands, load_band
from tests.unit.test_coordinator_scheduling import make_target


def test_bands_never_go_down_as_load_goes_up() -> None:
    loads = sorted(random.Random(1).uniform(0, 1e7) for _ in range(20_000)) + list(range(0, 5000))
    loads.sort()
    bands = [load_band(load) for load in loads]
    assert bands == sorted(bands)
    assert load_band(0) == load_band(0.5) == (0, 0) < load_band(1)
    assert len({load_band(load) for load in range(8192, 16384)}) == 64, "an octave holds 64 bands"


def test_the_least_loaded_member_is_the_one_a_full_look_finds() -> None:
    rng = random.Random(5)
    endpoints = [EndpointLoad(make_target(i)) for i in range(60)]
    Pool(endpoints)
    bands = LoadBands()
    heap = BandedLoadHeap(endpoints, bands)
    slots = {e.key: slot for slot, e in enumerate(rng.sample(endpoints, 50))}  # 10 endpoints hold nothing
    bands.rebuild(endpoints, slots, 0)
    for round_number in range(500):
        for endpoint in rng.sample(endpoints, 5):
            endpoint.tokens = rng.choice([0.0, 3.0, 100.0, 101.0, 5000.0, rng.uniform(0, 1e5)])
            endpoint.last_pick = rng.randint(-60, 1000)
            heap.update(endpoint)
        if round_number % 100 == 99:  # the index gave its slots out anew
            keys = list(slots)
            rng.shuffle(keys)
            slots = {key: slot for slot, key in enumerate(keys)}
            bands.rebuild(endpoints, slots, round_number)
        members = sum(1 << slot for slot in rng.sample(range(55), rng.randint(1, 40)))
        exclude = frozenset(e.instance_id for e in rng.sample(endpoints, rng.choice([0, 3])))
        in_group = [
            e
            for e in endpoints
            if e.key in slots and members >> slots[e.key] & 1 and e.instance_id not in exclude
        ]
        expected = min(in_group, key=lambda e: (e.tokens + e.kv, e.last_pick), default=None)
        assert bands.least_loaded(members, exclude) is expected
