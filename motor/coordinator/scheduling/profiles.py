"""Scheduling profiles (filters → weighted scorers → one picker) and the named policies built from them.

A policy is a named configuration of plugins per role; `scheduler_config.scheduler_type` selects one:

| policy | filters | scorers (weight) | picker |
|---|---|---|---|
| round_robin | role, routable, excluded | – | round_robin |
| load_balance | role, routable, excluded | load (1) | max_score |
| prefix_affinity, prefill and union roles | role, routable, excluded, load_ratio | prefix_affinity (1), load (1) | max_score |
| prefix_affinity, decode role | as load_balance | | |

In prefix_affinity an owner of the prompt's prefix scores at least 1 + its load score and every other endpoint
at most 1, so an owner that passed the load-ratio filter always wins and the least loaded owner among them;
when none passed, the least loaded endpoint takes the leg (and becomes an owner).
"""

from dataclasses import dataclass, field
from typing import Literal

from motor.coordinator.scheduling.filters import ExcludedFilter, LoadRatioFilter, RoleFilter, RoutableFilter
from motor.coordinator.scheduling.pickers import MaxScorePicker, RoundRobinPicker
from motor.coordinator.scheduling.plugins import Filter, Picker, PoolFilter, Scorer
from motor.coordinator.scheduling.prefix import PrefixIndex
from motor.coordinator.scheduling.scorers import LoadScorer, PrefixAffinityScorer
from motor.protocol.instances import InstanceRole

PolicyName = Literal["round_robin", "load_balance", "prefix_affinity"]
AFFINITY_ROLES: tuple[InstanceRole, ...] = ("prefill", "union")


@dataclass(frozen=True)
class SchedulingProfile:
    pool_filters: tuple[PoolFilter, ...]
    filters: tuple[Filter, ...]
    scorers: tuple[tuple[Scorer, float], ...]
    picker: Picker


@dataclass
class PolicyOptions:
    affinity_block_size: int = 128
    affinity_max_load_ratio: float = 2.0
    prefix_index: PrefixIndex = field(default_factory=PrefixIndex)


def build_profile(policy: PolicyName, role: InstanceRole, options: PolicyOptions) -> SchedulingProfile:
    """A fresh profile for one role's pool (pickers and scorers may keep per-pool state)."""
    pool_filters = (RoleFilter(role), RoutableFilter())
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
    if policy in ("load_balance", "prefix_affinity"):
        return SchedulingProfile(pool_filters, (ExcludedFilter(),), ((LoadScorer(), 1.0),), MaxScorePicker())
    raise ValueError(f"unknown scheduling policy {policy!r}")
