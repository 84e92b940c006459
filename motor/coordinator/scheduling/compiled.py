"""A profile compiled for one pool: the cheapest decider that gives exactly the profile's answer.

- `HeapDecider`: the load scorer and the max-score picker, filters that cannot drop the least loaded endpoint
  (`excluded`, `load_ratio`), and at most one preference: a binary sparse scorer weighted at least as much as
  the load scorer (prefix affinity). Without a preference the winner is the least loaded non-excluded endpoint,
  the indexed heap's head (O(1), plus O(k log k) for k excluded instances). With one, every preferred endpoint
  outscores every other, so the winner is the least loaded preferred endpoint that passes the filters, else the
  heap's head; only the few preferred endpoints are looked at. O(log n) per decision with the heap's upkeep.
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
from motor.coordinator.scheduling.plugins import Exclusions, LoadBoundFilter, PointFilter
from motor.coordinator.scheduling.profiles import SchedulingProfile
from motor.coordinator.scheduling.scorers import LoadScorer

INFINITE_LOAD = float("inf")


class Decider(ABC):
    heap: LoadHeap | None = None

    def __init__(self, profile: SchedulingProfile, pool: Pool) -> None:
        self.profile = profile
        self.pool = pool

    @abstractmethod
    def decide(self, demand: Demand, exclude: Exclusions) -> EndpointLoad | None: ...


class GenericDecider(Decider):
    def decide(self, demand: Demand, exclude: Exclusions) -> EndpointLoad | None:
        candidates = self.pool.endpoints
        for f in self.profile.filters:
            if not candidates:
                break
            candidates = f.apply(candidates, demand, exclude)
        if not candidates:
            return None
        totals = [0.0] * len(candidates)
        for scorer, weight in self.profile.scorers:
            for i, score in enumerate(scorer.score(candidates, demand)):
                totals[i] += weight * score
        return self.profile.picker.pick(candidates, totals)


class HeapDecider(Decider):
    def __init__(self, profile: SchedulingProfile, pool: Pool) -> None:
        super().__init__(profile, pool)
        self.heap = LoadHeap(pool.endpoints)
        preferences = [scorer for scorer, _ in profile.scorers if scorer.sparse]
        self._preference = preferences[0] if preferences else None
        self._bounds = tuple(f for f in profile.filters if isinstance(f, LoadBoundFilter))

    def decide(self, demand: Demand, exclude: Exclusions) -> EndpointLoad | None:
        least = self.heap.smallest_excluding(exclude)  # type: ignore[union-attr]
        if least is None or self._preference is None:
            return least
        preferred = self._preference.sparse_scores(self.pool, demand)
        if not preferred or least in preferred:
            return least
        least_load = least.tokens + least.kv
        limit = INFINITE_LOAD
        for f in self._bounds:
            limit = min(limit, f.limit(least_load, demand))
        best = least
        best_load = 0.0
        for endpoint in preferred:
            load = endpoint.tokens + endpoint.kv
            if load > limit or endpoint.instance_id in exclude:
                continue
            if (
                best is least
                or load < best_load
                or (load == best_load and endpoint.last_pick < best.last_pick)
            ):
                best, best_load = endpoint, load
        return best


class CursorDecider(Decider):
    def __init__(self, profile: SchedulingProfile, pool: Pool) -> None:
        super().__init__(profile, pool)
        self.picker: RoundRobinPicker = profile.picker  # type: ignore[assignment]
        self._others = tuple(
            f for f in profile.filters if isinstance(f, PointFilter) and not isinstance(f, ExcludedFilter)
        )

    def decide(self, demand: Demand, exclude: Exclusions) -> EndpointLoad | None:
        endpoints = self.pool.endpoints
        others = self._others
        n = len(endpoints)
        start = self.picker.cursor
        for offset in range(n):
            endpoint = endpoints[(start + offset) % n]
            if endpoint.instance_id in exclude:  # the excluded filter, inlined: it runs on every step
                continue
            if others and not all(f.keep(endpoint, demand, exclude) for f in others):
                continue
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
    load_weights = [weight for scorer, weight in scorers if isinstance(scorer, LoadScorer)]
    preferences = [(scorer, weight) for scorer, weight in scorers if scorer.sparse]
    if (
        isinstance(profile.picker, MaxScorePicker)
        and len(load_weights) == 1
        and load_weights[0] > 0
        and len(scorers) == 1 + len(preferences)
        and (
            not preferences
            or (len(preferences) == 1 and preferences[0][0].binary and preferences[0][1] >= load_weights[0])
        )
        and all(isinstance(f, ExcludedFilter | LoadBoundFilter) for f in filters)
    ):
        return HeapDecider(profile, pool)
    return GenericDecider(profile, pool)
