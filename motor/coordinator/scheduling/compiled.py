"""A profile compiled for one pool: the cheapest decider that gives exactly the profile's answer.

- `HeapDecider`: filters `excluded` (+ filters that keep the least loaded), the load scorer plus sparse
  scorers, the max-score picker. Among endpoints that no sparse scorer rates, the load scorer alone decides,
  so the winner is either the least loaded non-excluded endpoint — the indexed heap's head, O(1) plus
  O(k log k) for k excluded instances — or one of the few the sparse scorers list. The profile's filters,
  scorers and picker then run on that handful. O(log n) per decision with the heap's upkeep.
- `CursorDecider`: round robin with per-endpoint filters: walk from the cursor, filtering lazily.
- `GenericDecider`: every filter, scorer and the picker over the whole pool, O(n) per scorer; any profile
  the others cannot run, and the reference the other two are tested against.
"""

from abc import ABC, abstractmethod

from motor.coordinator.scheduling.demand import Demand
from motor.coordinator.scheduling.filters import ExcludedFilter
from motor.coordinator.scheduling.heap import LoadHeap
from motor.coordinator.scheduling.load import EndpointLoad, Pool
from motor.coordinator.scheduling.pickers import MaxScorePicker, RoundRobinPicker
from motor.coordinator.scheduling.plugins import Exclusions, PointFilter
from motor.coordinator.scheduling.profiles import SchedulingProfile
from motor.coordinator.scheduling.scorers import LoadScorer


class Decider(ABC):
    heap: LoadHeap | None = None

    def __init__(self, profile: SchedulingProfile, pool: Pool) -> None:
        self.profile = profile
        self.pool = pool

    @abstractmethod
    def decide(self, demand: Demand, exclude: Exclusions) -> EndpointLoad | None: ...

    def _score_and_pick(self, candidates: list[EndpointLoad], demand: Demand) -> EndpointLoad:
        totals = [0.0] * len(candidates)
        for scorer, weight in self.profile.scorers:
            for i, score in enumerate(scorer.score(candidates, demand)):
                totals[i] += weight * score
        return self.profile.picker.pick(candidates, totals)


class GenericDecider(Decider):
    def decide(self, demand: Demand, exclude: Exclusions) -> EndpointLoad | None:
        candidates = self.pool.endpoints
        for f in self.profile.filters:
            if not candidates:
                break
            candidates = f.apply(candidates, demand, exclude)
        if not candidates:
            return None
        return self._score_and_pick(candidates, demand)


class HeapDecider(Decider):
    def __init__(self, profile: SchedulingProfile, pool: Pool) -> None:
        super().__init__(profile, pool)
        self.heap = LoadHeap(pool.endpoints)
        self._dense = tuple((scorer, weight) for scorer, weight in profile.scorers if not scorer.sparse)
        self._sparse = tuple((scorer, weight) for scorer, weight in profile.scorers if scorer.sparse)
        self._filters = tuple(f for f in profile.filters if not isinstance(f, ExcludedFilter))

    def decide(self, demand: Demand, exclude: Exclusions) -> EndpointLoad | None:
        least = self.heap.smallest_excluding(exclude)  # type: ignore[union-attr]
        if least is None or not self._sparse:
            return least
        rated = [(weight, scorer.sparse_scores(self.pool, demand)) for scorer, weight in self._sparse]
        candidates = [least]
        for _, scores in rated:
            for endpoint in scores:
                if endpoint.instance_id not in exclude and endpoint not in candidates:
                    candidates.append(endpoint)
        if len(candidates) == 1:
            return least
        for f in self._filters:
            candidates = f.apply(candidates, demand, exclude)
        totals = [0.0] * len(candidates)
        for scorer, weight in self._dense:
            for i, score in enumerate(scorer.score(candidates, demand)):
                totals[i] += weight * score
        for weight, scores in rated:
            for i, endpoint in enumerate(candidates):
                totals[i] += weight * scores.get(endpoint, 0.0)
        return self.profile.picker.pick(candidates, totals)


class CursorDecider(Decider):
    def __init__(self, profile: SchedulingProfile, pool: Pool) -> None:
        super().__init__(profile, pool)
        self.picker: RoundRobinPicker = profile.picker  # type: ignore[assignment]
        self._filters: tuple[PointFilter, ...] = profile.filters  # type: ignore[assignment]

    def decide(self, demand: Demand, exclude: Exclusions) -> EndpointLoad | None:
        endpoints = self.pool.endpoints
        n = len(endpoints)
        start = self.picker.cursor
        for offset in range(n):
            endpoint = endpoints[(start + offset) % n]
            if all(f.keep(endpoint, demand, exclude) for f in self._filters):
                self.picker.cursor = endpoint.position + 1
                return endpoint
        return None


def compile_profile(profile: SchedulingProfile, pool: Pool) -> Decider:
    filters, scorers = profile.filters, profile.scorers
    if (
        isinstance(profile.picker, RoundRobinPicker)
        and not scorers
        and all(isinstance(f, PointFilter) for f in filters)
    ):
        return CursorDecider(profile, pool)
    load_scorers = [scorer for scorer, _ in scorers if isinstance(scorer, LoadScorer)]
    if (
        isinstance(profile.picker, MaxScorePicker)
        and len(load_scorers) == 1
        and all(scorer.sparse or scorer is load_scorers[0] for scorer, _ in scorers)
        and all(weight > 0 for _, weight in scorers)
        and all(isinstance(f, ExcludedFilter) or f.keeps_least_loaded for f in filters)
    ):
        return HeapDecider(profile, pool)
    return GenericDecider(profile, pool)
