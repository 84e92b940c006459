"""The scheduler's own state per endpoint: in-flight load and its place in the role's pool.

The registry's `Target` holds only the address; everything that changes per request lives here, owned by the
scheduler. An `EndpointLoad` follows its `Target` across refresh events (the registry keeps a Target while the
instance id, address, role and engine id stay the same), so load allocated before a refresh is released on the
same numbers after it.
"""

from motor.coordinator.registry import Target
from motor.coordinator.scheduling.prefill_stats import PrefillRate, StallRecord


class EndpointLoad:
    """In-flight load of one endpoint, in tokens: `tokens` still to compute, `kv` tokens of KV held; and what
    its legs showed so far (`prefill_rate`, `stalls`)."""

    __slots__ = (
        "heap_index",
        "in_flight",
        "instance_id",
        "key",
        "kv",
        "last_pick",
        "position",
        "prefill_rate",
        "role",
        "stalls",
        "target",
        "tokens",
    )

    def __init__(self, target: Target) -> None:
        self.target = target
        self.key = target.key
        self.instance_id = target.instance_id
        self.role = target.role
        self.tokens = 0.0
        self.kv = 0.0
        self.in_flight = 0
        self.heap_index = -1
        self.last_pick = 0
        self.position = -1
        self.prefill_rate = PrefillRate()
        self.stalls = StallRecord()

    @property
    def load(self) -> float:
        return self.tokens + self.kv

    def __repr__(self) -> str:
        return f"EndpointLoad({self.key}, tokens={self.tokens:g}, kv={self.kv:g}, in_flight={self.in_flight})"


class Pool:
    """The endpoints one role's profile may choose from, in registration order (`position`), keyed too."""

    __slots__ = ("by_key", "endpoints")

    def __init__(self, endpoints: list[EndpointLoad]) -> None:
        self.endpoints = endpoints
        self.by_key = {endpoint.key: endpoint for endpoint in endpoints}
        for position, endpoint in enumerate(endpoints):
            endpoint.position = position
            if endpoint.last_pick <= 0:
                # Never picked: order them by position, so (load, last pick) is a total order within the pool
                # and the heap and the generic picker break ties the same way.
                endpoint.last_pick = position - len(endpoints)
