"""Which registered endpoint serves a leg: per role, a profile of filters → scorers → picker
(`profiles.py`), compiled to the cheapest exact decider (`compiled.py`; the indexed heap for the load-based
policies, O(log n) per decision), over the scheduler's own per-endpoint load (`load.py`).

Load is allocated per leg and released in parts (`Allocation`): the tokens still to compute when the engine
has computed them, the KV tokens held when the next leg took them over, everything at the end.

Endpoints whose prefill legs stalled repeatedly are degraded (`prefill_stats.py`): every profile then decides
as if they had already failed the request, and only when that leaves no candidate does it consider them again.
"""

import time
from collections.abc import Callable, Iterable

from motor.coordinator.registry import ROLES, Target
from motor.coordinator.scheduling.compiled import Decider, compile_profile
from motor.coordinator.scheduling.demand import Demand
from motor.coordinator.scheduling.kv_affinity import KvAffinityWeights, KvLocator
from motor.coordinator.scheduling.load import EndpointLoad, Pool
from motor.coordinator.scheduling.plugins import Exclusions, PickObserver
from motor.coordinator.scheduling.prefill_stats import StallPolicy
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
        stall_policy: StallPolicy | None = None,
        kv_locator: KvLocator | None = None,
        kv_weights: KvAffinityWeights | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.policy = policy
        self.stall_policy = stall_policy or StallPolicy()
        self.clock = clock
        self._degraded: set[EndpointLoad] = set()
        self.health_changed: Callable[[EndpointLoad, bool], None] | None = None
        """Called with an endpoint and True when it became degraded, False when it recovered."""
        self.options = PolicyOptions(
            affinity_block_size,
            affinity_max_load_ratio,
            prefix_index or PrefixIndex(),
            admission_max_prefill_tokens,
            admission_max_decode_requests,
            kv_locator=kv_locator,
            kv_weights=kv_weights or KvAffinityWeights(),
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
        kept = set(loads.values())
        self._degraded = {endpoint for endpoint in self._degraded if endpoint in kept}
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
        demand.kv_matches = None  # a pick (a retry too) asks the KV locator afresh: the index moved on
        chosen = None
        if self._degraded and (avoided := self._avoided(role)):
            chosen = pool.decider.decide(demand, exclude | avoided)
        if chosen is None:
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

    # ---- what the legs showed ------------------------------------------------------------------------------

    def prefill_answered(self, endpoint: EndpointLoad, work_tokens: float, seconds: float) -> None:
        """A prefill leg placed when the endpoint had `work_tokens` to compute answered after `seconds`."""
        endpoint.prefill_rate.observe(work_tokens, seconds)

    def prefill_stalled(self, endpoint: EndpointLoad) -> bool:
        """A prefill leg missed its deadline there; True when that made the endpoint degraded."""
        if not endpoint.stalls.stalled(self.clock(), self.stall_policy):
            return False
        if endpoint in self._loads.values():
            self._degraded.add(endpoint)
        self._health_changed(endpoint, True)
        return True

    def _avoided(self, role: InstanceRole) -> frozenset[str]:
        """The degraded instances of a role (dropping those that recovered)."""
        now = self.clock()
        for endpoint in [e for e in self._degraded if e.stalls.recovered(now, self.stall_policy)]:
            self._degraded.discard(endpoint)
            self._health_changed(endpoint, False)
        return frozenset(endpoint.instance_id for endpoint in self._degraded if endpoint.role == role)

    def _health_changed(self, endpoint: EndpointLoad, degraded: bool) -> None:
        if self.health_changed is not None:
            self.health_changed(endpoint, degraded)

    def endpoint_load(self) -> dict[str, dict[str, float | bool | None]]:
        """In-flight load and observed health of every endpoint in a pool, by target key (the management API's
        view): `prefill_tokens_per_second` is the measured prefill rate (None before any prefill leg answered)."""
        for role in ROLES:
            self._avoided(role)
        now = self.clock()
        return {
            endpoint.key: {
                "in_flight": endpoint.in_flight,
                "tokens": endpoint.tokens,
                "kv_tokens": endpoint.kv,
                "prefill_tokens_per_second": endpoint.prefill_rate.tokens_per_second,
                "prefill_legs_measured": endpoint.prefill_rate.samples,
                "prefill_stalls": endpoint.stalls.stalls,
                "stall_score": round(endpoint.stalls.score(now, self.stall_policy), 3),
                "degraded": endpoint.stalls.degraded,
            }
            for pool in self._pools.values()
            for endpoint in pool.pool.endpoints
        }
