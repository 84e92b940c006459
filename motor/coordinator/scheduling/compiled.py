"""A profile compiled for one pool: the cheapest decider that gives exactly the profile's answer.

- `HeapDecider`: the load scorer and the max-score picker, filters that cannot drop the least loaded endpoint
  (`excluded`, `load_ratio`), and at most one preference: a binary sparse scorer weighted at least as much as
  the load scorer (prefix affinity). Without a preference the winner is the least loaded non-excluded endpoint,
  the indexed heap's head (O(1), plus O(k log k) for k excluded instances). With one, every preferred endpoint
  outscores every other, so the winner is the least loaded preferred endpoint that passes the filters, else the
  heap's head; only the few preferred endpoints are looked at. O(log n) per decision with the heap's upkeep.
- `CursorDecider`: round robin with per-endpoint filters: walk from the cursor, filtering lazily.
- `KvAffinityDecider`: kv_cache_affinity (`kv_affinity.py`). Endpoints that hold the same blocks of the prompt
  differ only by load, so the least loaded of each group stands for it: the heap's head for those the locator
  does not name, and for each group it names its least loaded member, found through the pool's load bands
  (`load_bands.py`) without looking at every member (unified); load_gated scores the `load_gate_topn` heads of
  the heap. O(g·b) mask operations for g groups and b load bands, plus the members in one band per group.
- `GenericDecider`: every filter, scorer and the picker over the whole pool, O(n) per scorer; any profile
  the others cannot run, and the reference the other two are tested against.
"""

from abc import ABC, abstractmethod

from motor.coordinator.scheduling.demand import Demand
from motor.coordinator.scheduling.filters import ExcludedFilter
from motor.coordinator.scheduling.heap import LoadHeap
from motor.coordinator.scheduling.kv_affinity import KvAffinityScorer, LeastLoadedFilter
from motor.coordinator.scheduling.load import EndpointLoad, Pool
from motor.coordinator.scheduling.load_bands import BandedLoadHeap, LoadBands
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


class KvAffinityDecider(Decider):
    def __init__(self, profile: SchedulingProfile, pool: Pool) -> None:
        super().__init__(profile, pool)
        self.bands = LoadBands()
        self.heap = BandedLoadHeap(pool.endpoints, self.bands)
        self.scorer: KvAffinityScorer = profile.scorers[0][0]  # type: ignore[assignment]

    def decide(self, demand: Demand, exclude: Exclusions) -> EndpointLoad | None:
        scorer = self.scorer
        heap: LoadHeap = self.heap  # type: ignore[assignment]
        if scorer.weights.mode == "load_gated":
            gate = heap.smallest(scorer.weights.gate_topn, exclude)
            return _best(gate, scorer.score(gate, demand)) if gate else None
        least = heap.smallest_excluding(exclude)
        matches = scorer.matches(demand)
        if least is None or matches is None or not matches.groups:
            return least
        bands = self.bands
        if not bands.current(matches.slots, matches.slot_version):
            bands.rebuild(self.pool.endpoints, matches.slots, matches.slot_version)
        # Within a group the cost differs only by load: its least loaded member stands for it.
        candidates = [least]
        for group in matches.groups:
            member = bands.least_loaded(group.members, exclude)
            if member is not None:
                candidates.append(member)
        return _best(candidates, scorer.score(candidates, demand))


_MAX_SCORE = MaxScorePicker()


def _best(candidates: list[EndpointLoad], scores: list[float]) -> EndpointLoad:
    """The max-score picker's rule: the highest score, ties to the endpoint picked least recently."""
    return _MAX_SCORE.pick(candidates, scores)


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
    if _runs_on_kv_decider(profile):
        return KvAffinityDecider(profile, pool)
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


def _runs_on_kv_decider(profile: SchedulingProfile) -> bool:
    """kv_affinity alone, over the excluded filter (and load_gated's gate), with weights under which an endpoint
    the locator names holds at least what the others do (w_npu ≥ w_cpu) and load breaks ties (load_weight > 0)."""
    scorers = profile.scorers
    if len(scorers) != 1 or not isinstance(scorers[0][0], KvAffinityScorer) or scorers[0][1] <= 0:
        return False
    if not isinstance(profile.picker, MaxScorePicker):
        return False
    weights = scorers[0][0].weights
    gated = weights.mode == "load_gated"
    expected = (ExcludedFilter, LeastLoadedFilter) if gated else (ExcludedFilter,)
    if tuple(type(f) for f in profile.filters) != expected:
        return False
    return gated or (weights.w_npu >= weights.w_cpu and weights.load_weight > 0)
