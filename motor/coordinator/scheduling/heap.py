"""An indexed binary min-heap of endpoints ordered by (load, last pick): the compiled form of "load scorer +
max-score picker" (see `motor.coordinator.scheduling.compiled`).

Endpoints remember their own position, so a load change repositions one endpoint in O(log n) and the least
loaded endpoint is read in O(1). Ties go to the endpoint picked least recently, which spreads idle load.
`steps` counts sift steps and comparisons so tests can show the logarithmic cost without timing.
"""

import heapq

from motor.coordinator.scheduling.load import EndpointLoad


def _before(a: EndpointLoad, b: EndpointLoad) -> bool:
    la, lb = a.tokens + a.kv, b.tokens + b.kv
    return la < lb or (la == lb and a.last_pick < b.last_pick)


class LoadHeap:
    def __init__(self, endpoints: list[EndpointLoad] | None = None) -> None:
        self._items: list[EndpointLoad] = []
        self.steps = 0
        for endpoint in endpoints or []:
            self.push(endpoint)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, endpoint: EndpointLoad) -> bool:
        i = endpoint.heap_index
        return 0 <= i < len(self._items) and self._items[i] is endpoint

    def peek(self) -> EndpointLoad | None:
        return self._items[0] if self._items else None

    def push(self, endpoint: EndpointLoad) -> None:
        endpoint.heap_index = len(self._items)
        self._items.append(endpoint)
        self._up(endpoint.heap_index)

    def remove(self, endpoint: EndpointLoad) -> None:
        if endpoint not in self:
            return
        i = endpoint.heap_index
        last = self._items.pop()
        endpoint.heap_index = -1
        if i < len(self._items):
            self._items[i] = last
            last.heap_index = i
            self._down(self._up(i))

    def update(self, endpoint: EndpointLoad) -> None:
        """Reposition `endpoint` after its load or last pick changed (no-op if it left the heap)."""
        i = endpoint.heap_index
        items = self._items
        n = len(items)
        if not (0 <= i < n and items[i] is endpoint):  # `endpoint in self`, inlined: runs per allocation
            return
        # most changes keep the order (one endpoint, or a small change): tested inline, no sift called
        if i > 0 and _before(endpoint, items[(i - 1) >> 1]):
            self._up(i)
            return
        child = 2 * i + 1
        if child < n and (
            _before(items[child], endpoint) or (child + 1 < n and _before(items[child + 1], endpoint))
        ):
            self._down(i)

    def smallest_excluding(self, excluded: set[str] | frozenset[str]) -> EndpointLoad | None:
        """The least loaded endpoint whose instance id is not in `excluded`.

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
            endpoint = items[i]
            if endpoint.instance_id not in excluded:
                return endpoint
            self._add_children(frontier, i)
        return None

    def smallest(self, n: int, excluded: set[str] | frozenset[str]) -> list[EndpointLoad]:
        """The `n` least loaded endpoints not in `excluded`, least loaded first (O(n log n + k log k))."""
        items = self._items
        found: list[EndpointLoad] = []
        if not items or n <= 0:
            return found
        frontier = [(items[0].tokens + items[0].kv, items[0].last_pick, 0)]
        while frontier and len(found) < n:
            _, _, i = heapq.heappop(frontier)
            self.steps += 1
            if items[i].instance_id not in excluded:
                found.append(items[i])
            self._add_children(frontier, i)
        return found

    def _add_children(self, frontier: list[tuple[float, int, int]], i: int) -> None:
        for child in (2 * i + 1, 2 * i + 2):
            if child < len(self._items):
                endpoint = self._items[child]
                heapq.heappush(frontier, (endpoint.tokens + endpoint.kv, endpoint.last_pick, child))
                self.steps += 1

    def _up(self, i: int) -> int:
        items = self._items
        endpoint = items[i]
        while i > 0:
            parent = (i - 1) >> 1
            self.steps += 1
            if not _before(endpoint, items[parent]):
                break
            items[i] = items[parent]
            items[i].heap_index = i
            i = parent
        items[i] = endpoint
        endpoint.heap_index = i
        return i

    def _down(self, i: int) -> int:
        items = self._items
        n = len(items)
        endpoint = items[i]
        while True:
            child = 2 * i + 1
            if child >= n:
                break
            right = child + 1
            self.steps += 1
            if right < n and _before(items[right], items[child]):
                child = right
            self.steps += 1
            if not _before(items[child], endpoint):
                break
            items[i] = items[child]
            items[i].heap_index = i
            i = child
        items[i] = endpoint
        endpoint.heap_index = i
        return i
