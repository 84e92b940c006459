"""Filter → score → pick, kept incremental so one decision costs O(log n) in the number of endpoints.

- filter: the role's pool holds only routable endpoints of active instances (rebuilt on refresh, not per
  request); endpoints that already failed this request are skipped while walking the order.
- score: `load_balance` and `prefix_affinity` order a pool by in-flight tokens + held KV tokens in an indexed
  heap updated on every allocation and release; `round_robin` orders by a rotating cursor.
- pick: the head of that order; `prefix_affinity` first tries the endpoint that most recently served the
  longest known prefix of the prompt and keeps it only while its load stays within
  `affinity_max_load_ratio` of the least loaded endpoint (counting the request itself on both sides).
"""

from dataclasses import dataclass, field
from typing import Literal

from motor.coordinator.registry import ROLES, Target, TargetsByRole
from motor.coordinator.scheduling.heap import LoadHeap
from motor.coordinator.scheduling.prefix import PrefixIndex, text_block_hashes, token_block_hashes
from motor.protocol.instances import InstanceRole

PolicyName = Literal["round_robin", "load_balance", "prefix_affinity"]
AFFINITY_ROLES = ("prefill", "union")


@dataclass(slots=True)
class Demand:
    """What a request costs, estimated without a tokenizer (see `motor.coordinator.requests`)."""

    prompt_tokens: int
    max_new_tokens: int
    prompt_text: str = ""
    prompt_token_ids: list[int] | None = None
    _hashes: list[int] | None = field(default=None, repr=False)

    def block_hashes(self, block_size: int) -> list[int]:
        if self._hashes is None:
            if self.prompt_token_ids is not None:
                self._hashes = token_block_hashes(self.prompt_token_ids, block_size)
            else:
                self._hashes = text_block_hashes(self.prompt_text, block_size)
        return self._hashes


class _Pool:
    def __init__(self, targets: list[Target], ordered: bool) -> None:
        self.targets = targets
        self.by_key = {t.key: t for t in targets}
        self.heap = LoadHeap(targets) if ordered else None
        self.cursor = 0


class Allocation:
    """Load a leg puts on one endpoint; released in parts (tokens when computed, KV when handed over)."""

    __slots__ = ("_scheduler", "kv", "target", "tokens")

    def __init__(self, scheduler: "Scheduler", target: Target, tokens: float, kv: float) -> None:
        self._scheduler = scheduler
        self.target = target
        self.tokens = tokens
        self.kv = kv
        target.in_flight += 1

    def release_tokens(self) -> None:
        if self.tokens:
            self.target.tokens -= self.tokens
            self.tokens = 0
            self._scheduler.reposition(self.target)

    def release_kv(self) -> None:
        if self.kv:
            self.target.kv -= self.kv
            self.kv = 0
            self._scheduler.reposition(self.target)

    def release(self) -> None:
        if self._scheduler is None:
            return
        target = self.target
        target.tokens -= self.tokens
        target.kv -= self.kv
        target.in_flight -= 1
        self.tokens = self.kv = 0
        self._scheduler.reposition(target)
        self._scheduler = None  # type: ignore[assignment]


class Scheduler:
    def __init__(
        self,
        policy: PolicyName,
        *,
        affinity_block_size: int = 128,
        affinity_max_load_ratio: float = 2.0,
        prefix_index: PrefixIndex | None = None,
    ) -> None:
        self.policy = policy
        self.affinity_block_size = affinity_block_size
        self.affinity_max_load_ratio = affinity_max_load_ratio
        self.prefix_index = prefix_index or PrefixIndex()
        self._pools: dict[InstanceRole, _Pool] = {role: _Pool([], self._ordered) for role in ROLES}
        self._picks = 0

    @property
    def _ordered(self) -> bool:
        return self.policy != "round_robin"

    def set_targets(self, by_role: TargetsByRole) -> None:
        for target in (t for pool in self._pools.values() for t in pool.targets):
            target.heap_index = -1
        self._pools = {role: _Pool(list(by_role.get(role, [])), self._ordered) for role in ROLES}

    def heap_steps(self, role: InstanceRole) -> int:
        heap = self._pools[role].heap
        return heap.steps if heap is not None else 0

    def pick(
        self, role: InstanceRole, demand: Demand, exclude: set[str] | frozenset[str] = frozenset()
    ) -> Target | None:
        pool = self._pools[role]
        if not pool.targets:
            return None
        if pool.heap is None:
            chosen = self._round_robin(pool, exclude)
        else:
            chosen = pool.heap.smallest_excluding(exclude)
            if chosen is not None and self.policy == "prefix_affinity" and role in AFFINITY_ROLES:
                chosen = self._affinity(pool, demand, exclude, chosen)
        if chosen is None:
            return None
        self._picks += 1
        chosen.last_pick = self._picks
        if pool.heap is not None:
            pool.heap.update(chosen)
        return chosen

    def allocate(self, target: Target, tokens: float, kv: float) -> Allocation:
        target.tokens += tokens
        target.kv += kv
        allocation = Allocation(self, target, tokens, kv)
        self.reposition(target)
        return allocation

    def reposition(self, target: Target) -> None:
        heap = self._pools[target.role].heap
        if heap is not None:
            heap.update(target)

    def _round_robin(self, pool: _Pool, exclude: set[str] | frozenset[str]) -> Target | None:
        targets = pool.targets
        n = len(targets)
        for offset in range(min(n, len(exclude) + 1)):
            target = targets[(pool.cursor + offset) % n]
            if target.instance_id not in exclude:
                pool.cursor = (pool.cursor + offset + 1) % n
                return target
        # More exclusions than the walk covered: fall back to a full pass (bounded by the exclusions).
        for target in targets:
            if target.instance_id not in exclude:
                return target
        return None

    def _affinity(
        self, pool: _Pool, demand: Demand, exclude: set[str] | frozenset[str], least: Target
    ) -> Target:
        hashes = demand.block_hashes(self.affinity_block_size)
        if not hashes:
            return least
        _, owners = self.prefix_index.deepest(hashes)
        best: Target | None = None
        for key in owners:
            owner = pool.by_key.get(key)
            if (
                owner is not None
                and owner.instance_id not in exclude
                and (best is None or owner.load < best.load)
            ):
                best = owner
        cost = max(1, demand.prompt_tokens)
        if best is None or best.load + cost > self.affinity_max_load_ratio * (least.load + cost):
            best = least
        self.prefix_index.remember(hashes, best.key)
        return best
