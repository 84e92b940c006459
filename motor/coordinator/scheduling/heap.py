"""An indexed binary min-heap of targets ordered by (load, last pick).

Targets remember their own position, so a load change repositions one target in O(log n) and the least
loaded target is read in O(1). Ties go to the target picked least recently, which spreads idle load.
`steps` counts sift steps and comparisons so tests can show the logarithmic cost without timing.
"""

import heapq

from motor.coordinator.registry import Target


def _before(a: Target, b: Target) -> bool:
    la, lb = a.tokens + a.kv, b.tokens + b.kv
    return la < lb or (la == lb and a.last_pick < b.last_pick)


class LoadHeap:
    def __init__(self, targets: list[Target] | None = None) -> None:
        self._items: list[Target] = []
        self.steps = 0
        for target in targets or []:
            self.push(target)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, target: Target) -> bool:
        i = target.heap_index
        return 0 <= i < len(self._items) and self._items[i] is target

    def peek(self) -> Target | None:
        return self._items[0] if self._items else None

    def push(self, target: Target) -> None:
        target.heap_index = len(self._items)
        self._items.append(target)
        self._up(target.heap_index)

    def remove(self, target: Target) -> None:
        if target not in self:
            return
        i = target.heap_index
        last = self._items.pop()
        target.heap_index = -1
        if i < len(self._items):
            self._items[i] = last
            last.heap_index = i
            self._down(self._up(i))

    def update(self, target: Target) -> None:
        """Reposition `target` after its load or last pick changed (no-op if it left the heap)."""
        if target in self:
            self._down(self._up(target.heap_index))

    def smallest_excluding(self, excluded: set[str] | frozenset[str]) -> Target | None:
        """The least loaded target whose instance id is not in `excluded`.

        Only children of excluded nodes are explored, so the cost is O(k log k) for k excluded instances,
        independent of the heap size.
        """
        items = self._items
        if not items:
            return None
        root = items[0]
        if root.instance_id not in excluded:
            return root
        frontier: list[tuple[float, int, int]] = []
        self._add_children(frontier, 0)
        while frontier:
            _, _, i = heapq.heappop(frontier)
            self.steps += 1
            target = items[i]
            if target.instance_id not in excluded:
                return target
            self._add_children(frontier, i)
        return None

    def _add_children(self, frontier: list[tuple[float, int, int]], i: int) -> None:
        for child in (2 * i + 1, 2 * i + 2):
            if child < len(self._items):
                target = self._items[child]
                heapq.heappush(frontier, (target.tokens + target.kv, target.last_pick, child))
                self.steps += 1

    def _up(self, i: int) -> int:
        items = self._items
        target = items[i]
        while i > 0:
            parent = (i - 1) >> 1
            self.steps += 1
            if not _before(target, items[parent]):
                break
            items[i] = items[parent]
            items[i].heap_index = i
            i = parent
        items[i] = target
        target.heap_index = i
        return i

    def _down(self, i: int) -> int:
        items = self._items
        n = len(items)
        target = items[i]
        while True:
            child = 2 * i + 1
            if child >= n:
                break
            right = child + 1
            self.steps += 1
            if right < n and _before(items[right], items[child]):
                child = right
            self.steps += 1
            if not _before(items[child], target):
                break
            items[i] = items[child]
            items[i].heap_index = i
            i = child
        items[i] = target
        target.heap_index = i
        return i
