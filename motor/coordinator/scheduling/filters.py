"""Filters: which endpoints may take a leg at all."""

import math

from motor.coordinator.registry import Target
from motor.coordinator.scheduling.demand import Demand
from motor.coordinator.scheduling.load import EndpointLoad
from motor.coordinator.scheduling.plugins import Exclusions, LoadBoundFilter, PointFilter, PoolFilter
from motor.protocol.instances import InstanceRole


class RoleFilter(PoolFilter):
    """Endpoints of instances registered with the role (prefill, decode or union)."""

    name = "role"

    def __init__(self, role: InstanceRole) -> None:
        self.role = role

    def keep(self, target: Target) -> bool:
        return target.role == self.role


class RoutableFilter(PoolFilter):
    """Endpoints of instances the controller reports active."""

    name = "routable"

    def keep(self, target: Target) -> bool:
        return target.routable


class ExcludedFilter(PointFilter):
    """Instances that already failed this request (the retry goes elsewhere while anywhere else is left)."""

    name = "excluded"

    def keep(self, endpoint: EndpointLoad, demand: Demand, exclude: Exclusions) -> bool:
        return endpoint.instance_id not in exclude


class LoadRatioFilter(LoadBoundFilter):
    """Endpoints whose load stays within `max_ratio` of the least loaded candidate's, counting the request's
    own prompt tokens on both sides (`load + cost ≤ max_ratio × (least load + cost)`), so a preference such
    as prefix affinity cannot pile a hot prefix onto one instance."""

    name = "load_ratio"

    def __init__(self, max_ratio: float) -> None:
        if max_ratio < 1.0:
            raise ValueError(
                f"max_ratio must be at least 1 (the least loaded endpoint must pass), not {max_ratio}"
            )
        self.max_ratio = max_ratio

    def limit(self, least_load: float, demand: Demand) -> float:
        cost = max(1, demand.prompt_tokens)
        return self.max_ratio * (least_load + cost) - cost


class AdmissionFilter(PointFilter):
    """Endpoints below their admission bounds: fewer than `max_tokens` tokens still to compute (a prefill
    queue), fewer than `max_requests` legs in flight (a decode batch). When no endpoint is below them the leg
    waits for room or is refused (the scheduler's `saturated`), instead of overloading an engine."""

    name = "admission"

    def __init__(self, max_tokens: float | None = None, max_requests: int | None = None) -> None:
        self.max_tokens = math.inf if max_tokens is None else max_tokens
        self.max_requests = math.inf if max_requests is None else max_requests

    def keep(self, endpoint: EndpointLoad, demand: Demand, exclude: Exclusions) -> bool:
        return endpoint.tokens < self.max_tokens and endpoint.in_flight < self.max_requests
