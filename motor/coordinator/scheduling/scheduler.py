"""Which registered endpoint serves a leg: per role, a profile of filters → scorers → picker
(`profiles.py`), compiled to the cheapest exact decider (`compiled.py`; the indexed heap for the load-based
policies, O(log n) per decision), over the scheduler's own per-endpoint load (`load.py`).

Load is allocated per leg and released in parts (`Allocation`): the tokens still to compute when the engine
has computed them, the KV tokens held when the next leg took them over, everything at the end.
"""

from collections.abc import Callable, Iterable

from motor.coordinator.registry import ROLES, Target
from motor.coordinator.scheduling.compiled import Decider, compile_profile
from motor.coordinator.scheduling.demand import Demand
from motor.coordinator.scheduling.load import EndpointLoad, Pool
from motor.coordinator.scheduling.plugins import Exclusions, PickObserver
from motor.coordinator.scheduling.prefix import PrefixIndex
from motor.coordinator.scheduling.profiles import PolicyName, PolicyOptions, SchedulingProfile, build_profile
from motor.protocol.instances import InstanceRole


class Allocation:
    """Load a leg puts on one endpoint; released in parts (tokens when computed, KV when handed over)."""

    __slots__ = ("_scheduler", "endpoint", "kv", "tokens")

    def __init__(self, scheduler: "Scheduler", endpoint: EndpointLoad, tokens: float, kv: float) -> None:
        self._scheduler: Scheduler | None = scheduler
        self.endpoint = endpoint
        self.tokens = tokens
        self.kv = kv
        endpoint.tokens += tokens
        endpoint.kv += kv
        endpoint.in_flight += 1

    def release_tokens(self) -> None:
        if self.tokens and self._scheduler is not None:
            self.endpoint.tokens -= self.tokens
            self.tokens = 0
            self._scheduler.released(self.endpoint)

    def release_kv(self) -> None:
        if self.kv and self._scheduler is not None:
            self.endpoint.kv -= self.kv
            self.kv = 0
            self._scheduler.released(self.endpoint)

    def release(self) -> None:
        scheduler = self._scheduler
        if scheduler is None:
            return
        endpoint = self.endpoint
        endpoint.tokens -= self.tokens
        endpoint.kv -= self.kv
        endpoint.in_flight -= 1
        self.tokens = self.kv = 0
        self._scheduler = None
        scheduler.released(endpoint)


class _RolePool:
    __slots__ = ("decider", "heap", "hooks", "pool", "profile")

    def __init__(self, profile: SchedulingProfile, endpoints: list[EndpointLoad]) -> None:
        self.profile = profile
        self.pool = Pool(endpoints)
        self.decider: Decider = compile_profile(profile, self.pool)
        self.heap = self.decider.heap
        self.hooks: tuple[PickObserver, ...] = (
            *(scorer for scorer, _ in profile.scorers if isinstance(scorer, PickObserver)),
            *profile.observers,
        )


class Scheduler:
    def __init__(
        self,
        policy: PolicyName,
        *,
        affinity_block_size: int = 128,
        affinity_max_load_ratio: float = 2.0,
        prefix_index: PrefixIndex | None = None,
        admission_max_prefill_tokens: float = 16384,
        admission_max_decode_requests: int = 256,
    ) -> None:
        self.policy = policy
        self.options = PolicyOptions(
            affinity_block_size,
            affinity_max_load_ratio,
            prefix_index or PrefixIndex(),
            admission_max_prefill_tokens,
            admission_max_decode_requests,
        )
        self._room_waiters: list[Callable[[], None]] = []
        self._loads: dict[Target, EndpointLoad] = {}
        self._pools: dict[InstanceRole, _RolePool] = {
            role: _RolePool(build_profile(policy, role, self.options), []) for role in ROLES
        }
        self._picks = 0

    @property
    def prefix_index(self) -> PrefixIndex:
        return self.options.prefix_index

    def decider(self, role: InstanceRole) -> Decider:
        """The role's profile as compiled for its current pool."""
        return self._pools[role].decider

    def set_targets(self, targets: Iterable[Target]) -> None:
        """The registry's endpoints changed: rebuild each role's pool through its profile's pool filters.
        Endpoints that stay keep their load; allocations on endpoints that left are released harmlessly."""
        targets = list(targets)
        loads = {target: self._loads.get(target) or EndpointLoad(target) for target in targets}
        for endpoint in self._loads.values():
            endpoint.heap_index = -1
        self._loads = loads
        pools = {}
        for role in ROLES:
            profile = build_profile(self.policy, role, self.options)
            members = [
                loads[target] for target in targets if all(f.keep(target) for f in profile.pool_filters)
            ]
            pools[role] = _RolePool(profile, members)
        self._pools = pools

    def heap_steps(self, role: InstanceRole) -> int:
        heap = self._pools[role].heap
        return heap.steps if heap is not None else 0

    def pick(self, role: InstanceRole, demand: Demand, exclude: Exclusions = frozenset()) -> Target | None:
        pool = self._pools[role]
        chosen = pool.decider.decide(demand, exclude)
        if chosen is None:
            return None
        self._picks += 1
        chosen.last_pick = self._picks
        if pool.heap is not None:
            pool.heap.update(chosen)
        for scorer in pool.hooks:
            scorer.picked(chosen, demand)
        return chosen.target

    def allocate(self, target: Target, tokens: float, kv: float) -> Allocation:
        endpoint = self._loads.get(target)
        if endpoint is None:  # the instance left between pick and allocate: count it on a detached record
            endpoint = EndpointLoad(target)
        allocation = Allocation(self, endpoint, tokens, kv)
        self.reposition(endpoint)
        return allocation

    def saturated(self, role: InstanceRole) -> bool:
        """Whether a failed pick of `role` means every endpoint is at its admission bound (not that none is
        registered): then the leg may wait for room (`when_released`)."""
        pool = self._pools[role]
        return pool.profile.admission and bool(pool.pool.endpoints)

    def when_released(self, callback: Callable[[], None]) -> None:
        """Call `callback` once, the next time any allocation releases load."""
        self._room_waiters.append(callback)

    def released(self, endpoint: EndpointLoad) -> None:
        self.reposition(endpoint)
        if self._room_waiters:
            waiters, self._room_waiters = self._room_waiters, []
            for callback in waiters:
                callback()

    def reposition(self, endpoint: EndpointLoad) -> None:
        heap = self._pools[endpoint.role].heap
        if heap is not None:
            heap.update(endpoint)

    def endpoint_load(self) -> dict[str, dict[str, float]]:
        """In-flight load of every endpoint in a pool, by target key (the management API's view)."""
        return {
            endpoint.key: {
                "in_flight": endpoint.in_flight,
                "tokens": endpoint.tokens,
                "kv_tokens": endpoint.kv,
            }
            for pool in self._pools.values()
            for endpoint in pool.pool.endpoints
        }
