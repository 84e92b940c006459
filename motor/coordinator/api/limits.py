"""Rate limit (token bucket) and in-flight request limit, exact across worker processes.

One process: plain counters. Several workers: one small file mapped into every worker (under the run
directory) holds the bucket (tokens, last refill on CLOCK_MONOTONIC, which all processes share) and one
in-flight counter slot per worker; updates take an exclusive `flock` on that file (two syscalls, a few µs).
A worker that dies leaves its slot behind; the supervisor zeroes the slot before restarting it.
"""

import fcntl
import mmap
import os
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MAX_WORKERS = 64
_HEADER = struct.Struct("<dd")  # tokens, last refill
_SLOT = struct.Struct("<q")
_SLOTS_OFFSET = 64
FILE_SIZE = _SLOTS_OFFSET + MAX_WORKERS * _SLOT.size


class SharedState:
    """The mapped file; `create` once in the supervisor, `open` in every worker."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR)
        self._map = mmap.mmap(self._fd, FILE_SIZE)

    @classmethod
    def create(cls, path: Path, initial_tokens: float) -> "SharedState":
        with open(path, "wb") as f:
            f.write(bytes(FILE_SIZE))
        state = cls(path)
        _HEADER.pack_into(state._map, 0, initial_tokens, time.monotonic())
        return state

    @contextmanager
    def locked(self) -> Iterator[mmap.mmap]:
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield self._map
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def zero_slot(self, index: int) -> None:
        with self.locked() as m:
            _SLOT.pack_into(m, _SLOTS_OFFSET + index * _SLOT.size, 0)

    def close(self) -> None:
        self._map.close()
        os.close(self._fd)


class TokenBucket:
    """`capacity` tokens refilled at `capacity / window` per second; one token per request."""

    def __init__(self, capacity: int, window: float, shared: SharedState | None = None) -> None:
        self.capacity = float(capacity)
        self.rate = capacity / window
        self._shared = shared
        self._tokens = self.capacity
        self._last = time.monotonic()

    def try_take(self) -> tuple[bool, int]:
        """(allowed, whole tokens left)."""
        now = time.monotonic()
        if self._shared is None:
            self._tokens, allowed = self._take(self._tokens, self._last, now)
            self._last = now
            return allowed, int(self._tokens)
        with self._shared.locked() as m:
            tokens, last = _HEADER.unpack_from(m, 0)
            tokens, allowed = self._take(tokens, last, now)
            _HEADER.pack_into(m, 0, tokens, max(now, last))
        return allowed, int(tokens)

    def _take(self, tokens: float, last: float, now: float) -> tuple[float, bool]:
        tokens = min(self.capacity, tokens + max(0.0, now - last) * self.rate)
        if tokens >= 1.0:
            return tokens - 1.0, True
        return tokens, False

    def retry_after(self) -> float:
        return 1.0 / self.rate


class InFlightLimit:
    """At most `limit` client requests in flight (None: unlimited)."""

    def __init__(self, limit: int | None, shared: SharedState | None = None, slot: int = 0) -> None:
        self.limit = limit
        self._shared = shared
        self._offset = _SLOTS_OFFSET + slot * _SLOT.size
        self.local = 0

    def try_enter(self) -> bool:
        if self.limit is None:
            self.local += 1
            return True
        if self._shared is None:
            if self.local >= self.limit:
                return False
            self.local += 1
            return True
        with self._shared.locked() as m:
            total = sum(v for (v,) in _SLOT.iter_unpack(m[_SLOTS_OFFSET:]))
            if total >= self.limit:
                return False
            self.local += 1
            _SLOT.pack_into(m, self._offset, self.local)
        return True

    def leave(self) -> None:
        self.local -= 1
        if self.limit is not None and self._shared is not None:
            with self._shared.locked() as m:
                _SLOT.pack_into(m, self._offset, self.local)


class ClientBuckets:
    """A token bucket per client address (`capacity` tokens refilled over `window` s), for this process.

    Bounded: beyond `max_clients` addresses the longest-known one is forgotten (it starts full again)."""

    def __init__(self, capacity: int, window: float, max_clients: int = 65536) -> None:
        self.capacity = float(capacity)
        self.rate = capacity / window
        self.max_clients = max_clients
        self._buckets: dict[str, tuple[float, float]] = {}

    def try_take(self, client: str) -> bool:
        now = time.monotonic()
        state = self._buckets.get(client)
        if state is None:
            if len(self._buckets) >= self.max_clients:
                del self._buckets[next(iter(self._buckets))]
            tokens = self.capacity
        else:
            tokens, last = state
            tokens = min(self.capacity, tokens + (now - last) * self.rate)
        allowed = tokens >= 1.0
        self._buckets[client] = (tokens - 1.0 if allowed else tokens, now)
        return allowed

    def retry_after(self) -> float:
        return 1.0 / self.rate
