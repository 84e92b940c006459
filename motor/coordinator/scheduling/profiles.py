"""Scheduling profiles (filters → weighted scorers → one picker) and the named policies built from them.

A policy is a named configuration of plugins per role; `scheduler_config.scheduler_type` selects one:

| policy | filters | scorers (weight) | picker |
|---|---|---|---|
| round_robin | role, routable, excluded | – | round_robin |
| load_balance | role, routable, excluded | load (1) | max_score |
| prefix_affinity, prefill and union roles | role, routable, excluded, load_ratio | prefix_affinity (1), load (1) | max_score |
| prefix_affinity, decode role | as load_balance | | |
| pd_aware, prefill and union roles | role, routable, excluded, admission (queued tokens) | queued_prefill (1) | max_score |
| kv_cache_affinity, prefill and union roles, unified | role, routable, excluded | kv_affinity (1) | max_score |
| kv_cache_affinity, prefill and union roles, load_gated | role, routable, excluded, least_loaded (topn) | kv_affinity (1) | max_score |
| kv_cache_affinity, decode role | as load_balance | | |
| pd_aware, decode role | role, routable, excluded, admission (legs in flight) | kv_held (1), batch (1) | max_score |
| every policy, encode role | role, routable, excluded | load (1) | max_score |

An encode leg's load is the request's encode score (`motor.coordinator.encode.score`), so the least outstanding
encode score wins whatever the policy: the policies rank prompts, and an encode instance computes images.

In prefix_affinity an owner of the prompt's prefix scores at least 1 + its load score and every other endpoint
at most 1, so an owner that passed the load-ratio filter always wins and the least loaded owner among them;
when none passed, the least loaded endpoint takes the leg (and becomes an owner).

kv_cache_affinity (pyMotor's policy) scores what each endpoint holds of the prompt in its own cache, its CPU tier
and the shared pool, as the engines' KV events and the pool tell it (`kv_affinity.py`).

pd_aware (a motor extension) places each leg of a PD request by what that leg costs its engine: a prefill by
the compute queued there, counting for every prefill leg only what the shared pool is not expected to hold
(`pool_hits.py`: route by compute left, not by who saw the prefix); a decode by the KV it holds and its batch.
Its admission filters keep a leg off an engine at its bound (`admission_max_prefill_tokens` queued,
`admission_max_decode_requests` in flight); with every engine at its bound the leg waits for room.
"""

from dataclasses import dataclass, field
from typing import Literal

from motor.coordinator.scheduling.filters import (
    AdmissionFilter,
    ExcludedFilter,
    LoadRatioFilter,
    RoleFilter,
    RoutableFilter,
)
from motor.coordinator.scheduling.kv_affinity import (
    KvAffinityScorer,
    KvAffinityWeights,
    KvLocator,
    LeastLoadedFilter,
)
from motor.coordinator.scheduling.pickers import MaxScorePicker, RoundRobinPicker
from motor.coordinator.scheduling.plugins import Filter, Picker, PickObserver, PoolFilter, Scorer
from motor.coordinator.scheduling.pool_hits import PoolHits
from motor.coordinator.scheduling.prefix import PrefixIndex
from motor.coordinator.scheduling.scorers import (
    BatchScorer,
    KvHeldScorer,
    LoadScorer,
    PrefixAffinityScorer,
    QueuedPrefillScorer,
)
from motor.protocol.instances import InstanceRole

PolicyName = Literal["round_robin", "load_balance", "prefix_affinity", "pd_aware", "kv_cache_affinity"]
AFFINITY_ROLES: tuple[InstanceRole, ...] = ("prefill", "union")


@dataclass(frozen=True)
class SchedulingProfile:
    pool_filters: tuple[PoolFilter, ...]
    filters: tuple[Filter, ...]
    scorers: tuple[tuple[Scorer, float], ...]
    picker: Picker
    observers: tuple[PickObserver, ...] = ()  # learn from each decision without scoring

    @property
    def admission(self) -> bool:
        """Whether a leg may find every endpoint at its admission bound (and then wait for room)."""
        return any(isinstance(f, AdmissionFilter) for f in self.filters)


@dataclass
class PolicyOptions:
    affinity_block_size: int = 128
    affinity_max_load_ratio: float = 2.0
    prefix_index: PrefixIndex = field(default_factory=PrefixIndex)
    admission_max_prefill_tokens: float = 16384
    admission_max_decode_requests: int = 256
    pool_hits: PoolHits | None = None  # pd_aware's estimate, shared by the profiles of one scheduler
    kv_locator: KvLocator | None = None  # kv_cache_affinity's view of where KV blocks are
    kv_weights: KvAffinityWeights = field(default_factory=KvAffinityWeights)


def build_profile(policy: PolicyName, role: InstanceRole, options: PolicyOptions) -> SchedulingProfile:
    """A fresh profile for one role's pool (pickers and scorers may keep per-pool state)."""
    pool_filters = (RoleFilter(role), RoutableFilter())
    if role == "encode":
        return SchedulingProfile(pool_filters, (ExcludedFilter(),), ((LoadScorer(), 1.0),), MaxScorePicker())
    if policy == "round_robin":
        return SchedulingProfile(pool_filters, (ExcludedFilter(),), (), RoundRobinPicker())
    if policy == "prefix_affinity" and role in AFFINITY_ROLES:
        return SchedulingProfile(
            pool_filters,
            (ExcludedFilter(), LoadRatioFilter(options.affinity_max_load_ratio)),
            (
                (PrefixAffinityScorer(options.prefix_index, options.affinity_block_size), 1.0),
                (LoadScorer(), 1.0),
            ),
            MaxScorePicker(),
        )
    if policy == "kv_cache_affinity" and role in AFFINITY_ROLES:
        if options.kv_locator is None:
            raise ValueError("kv_cache_affinity needs a KV locator")
        weights = options.kv_weights
        gate = (LeastLoadedFilter(weights.gate_topn),) if weights.mode == "load_gated" else ()
        return SchedulingProfile(
            pool_filters,
            (ExcludedFilter(), *gate),
            ((KvAffinityScorer(options.kv_locator, weights), 1.0),),
            MaxScorePicker(),
        )
    if policy == "pd_aware":
        if role == "decode":
            admission = AdmissionFilter(max_requests=options.admission_max_decode_requests)
            return SchedulingProfile(
                pool_filters,
                (ExcludedFilter(), admission),
                ((KvHeldScorer(), 1.0), (BatchScorer(), 1.0)),
                MaxScorePicker(),
            )
        if options.pool_hits is None:
            options.pool_hits = PoolHits(options.affinity_block_size)
        return SchedulingProfile(
            pool_filters,
            (ExcludedFilter(), AdmissionFilter(max_tokens=options.admission_max_prefill_tokens)),
            ((QueuedPrefillScorer(), 1.0),),
            MaxScorePicker(),
            (options.pool_hits,),
        )
    if policy in ("load_balance", "prefix_affinity", "kv_cache_affinity"):
        return SchedulingProfile(pool_filters, (ExcludedFilter(),), ((LoadScorer(), 1.0),), MaxScorePicker())
    raise ValueError(f"unknown scheduling policy {policy!r}")
