"""The client motor uses to put and get KV bytes in the pool: a thin typed layer over Mooncake's store.

Mooncake semantics kept as they are: a put never overwrites an existing key (upsert does), every read
grants the object a lease of `default_kv_lease_ttl` during which it can be neither evicted nor removed
(unless forced), and values must be non-empty and no larger than the client's `local_buffer_size`.

While the master is gone the client fails fast: the first call that finds it gone opens a circuit breaker
(motor.kvstore.outage), later calls raise StoreUnavailable at once instead of blocking seconds in Mooncake's
reconnect loop, and calls go through again once the master's port accepts connections and a trial call works.
"""

import ctypes
import functools
import mmap
import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Concatenate, NoReturn, ParamSpec, Self, TypeVar

from mooncake.store import MooncakeDistributedStore, ReplicateConfig

from motor.kvstore.config import StoreSettings, store_settings
from motor.kvstore.errors import (
    CODE_NAMES,
    INVALID_PARAMS,
    NO_AVAILABLE_HANDLE,
    OBJECT_HAS_LEASE,
    OBJECT_NOT_FOUND,
    RPC_FAIL,
    TRANSFER_FAIL,
    StoreError,
    StoreUnavailable,
)
from motor.kvstore.outage import MasterOutage, OutageView
from motor.runtime.backoff import Backoff
from motor.runtime.net import accepts_connections, split_host_port

Value = bytes | bytearray | memoryview


# Writes refused with -200 (NO_AVAILABLE_HANDLE) are retried until eviction frees space, this many times at most.
FULL_POOL_RETRY = Backoff(initial_s=0.005, factor=2.0, cap_s=0.1, max_attempts=20)
# Writes that failed with -800 (TRANSFER_FAIL) are placed anew, this many attempts in all. The master places a
# value on a random segment, and a killed client's segment stays registered for about 10 s: with one dead segment
# beside one live one about half the writes failed meanwhile, with three dead beside one 78 % (measured
# 2026-12-04). A client that lends the pool memory places the retry on its own segment, which is alive (0 of 200
# failed), then on random ones again.
PLACEMENT_ATTEMPTS = 8
# How long a look at the master's port may take during an outage (loopback refuses at once).
MASTER_LOOK_TIMEOUT_S = 0.2

P = ParamSpec("P")
R = TypeVar("R")


def _guarded(
    method: "Callable[Concatenate[StoreClient, P], R]",
) -> "Callable[Concatenate[StoreClient, P], R]":
    """Run a call that needs the master through the client's outage breaker."""

    @functools.wraps(method)
    def guarded(self: "StoreClient", *args: P.args, **kwargs: P.kwargs) -> R:
        outage = self._outage
        if not outage.admit():
            raise StoreUnavailable(
                f"{method.__name__}: skipped, mooncake_master at {self.master_address} is unavailable (it did "
                "not answer earlier calls); the call goes through again once it is back",
                RPC_FAIL,
            )
        try:
            result = method(self, *args, **kwargs)
        except StoreUnavailable:
            outage.failed()
            raise
        except BaseException:
            if outage.down:
                outage.inconclusive()
            raise
        if outage.down:
            outage.succeeded()
        return result

    return guarded


class RegisteredBuffer:
    """Page-aligned memory registered with the store for zero-copy `put_from` / `get_into`.

    Fill it and read it through `view`; it stays valid until `StoreClient.unregister_buffer` or `close`.
    """

    def __init__(self, size: int) -> None:
        self._memory = mmap.mmap(-1, size)
        self._pin = ctypes.c_char.from_buffer(self._memory)
        self.address = ctypes.addressof(self._pin)
        self.size = size
        self.view = memoryview(self._memory)
        self.registered = False


class _ClosedStore:
    """Takes the native store's place after close(): Mooncake crashes the process when used after close."""

    def __getattr__(self, name: str) -> Callable[..., NoReturn]:
        def refuse(*_args: object) -> NoReturn:
            raise StoreError(f"{name}: the store client is closed; connect a new one")

        return refuse


class StoreClient:
    """A connected Mooncake store client; build it with `StoreClient.connect(...)`."""

    def __init__(self, store: MooncakeDistributedStore, settings: StoreSettings, retry: Backoff) -> None:
        self._settings = settings
        self._retry = retry
        self._closed = False
        self._buffers: list[RegisteredBuffer] = []
        self._anywhere = ReplicateConfig()
        self._own_segment: ReplicateConfig | None = None
        if settings.global_segment_size > 0:
            self._own_segment = ReplicateConfig()
            self._own_segment.preferred_segment = store.get_hostname()
        host, port = split_host_port(settings.master_server_address)
        self._outage = MasterOutage(lambda: accepts_connections(host, port, timeout_s=MASTER_LOOK_TIMEOUT_S))
        self._bind(store)

    def _bind(self, store: "MooncakeDistributedStore | _ClosedStore") -> None:
        # Bound methods looked up once: the hot paths are a single native call plus one comparison.
        self._store = store
        self._put = store.put
        self._get = store.get
        self._is_exist = store.is_exist
        self._remove = store.remove
        self._put_batch = store.put_batch
        self._upsert = store.upsert
        self._upsert_batch = store.upsert_batch
        self._get_batch = store.get_batch
        self._batch_is_exist = store.batch_is_exist
        self._put_from = store.put_from
        self._get_into = store.get_into

    @classmethod
    def connect(
        cls,
        store_config: Mapping[str, Any],
        *,
        local_hostname: str = "127.0.0.1",
        retry: Backoff = FULL_POOL_RETRY,
        connect_timeout_s: float = 2.0,
    ) -> "StoreClient":
        """Set up a client against the master the config names, contributing `global_segment_size` bytes.

        Raises StoreUnavailable at once when the master's RPC port does not accept connections
        (Mooncake itself would retry for about 90 s).
        """
        settings = store_settings(store_config, "store config")
        host, port = split_host_port(settings.master_server_address)
        if not accepts_connections(host, port, timeout_s=connect_timeout_s):
            raise StoreUnavailable(
                f"mooncake_master at {settings.master_server_address} does not accept connections (waited "
                f"{connect_timeout_s:g} s); start it (motor.pool.master.MooncakeMaster) or fix "
                "master_server_address / kv_cache_pool_config.port"
            )
        store = MooncakeDistributedStore()
        code = store.setup(
            local_hostname,
            settings.metadata_server,
            settings.global_segment_size,
            settings.local_buffer_size,
            settings.protocol,
            settings.device_name,
            settings.master_server_address,
        )
        if code != 0:
            raise StoreUnavailable(
                f"setting up the store client against {settings.master_server_address} failed (code {code}); "
                f"protocol {settings.protocol!r} must be one this Mooncake build supports ('tcp' on CPU, "
                "'rdma' needs RDMA devices, 'ascend' an Ascend build) and metadata_server must be reachable "
                "('P2PHANDSHAKE' needs none); Mooncake's own log lines above give the detail",
                code,
            )
        return cls(store, settings, retry)

    @classmethod
    def adopt(
        cls,
        store: MooncakeDistributedStore,
        store_config: Mapping[str, Any],
        *,
        retry: Backoff = FULL_POOL_RETRY,
    ) -> "StoreClient":
        """Wrap a native store already set up with `store_config` (e.g. by an engine's connector in this
        process); the client takes it over and closes it on close()."""
        return cls(store, store_settings(store_config, "store config"), retry)

    @property
    def master_address(self) -> str:
        return self._settings.master_server_address

    def master_unavailable(self) -> bool:
        """True while calls would be refused without asking the master (an outage, no look due yet)."""
        return self._outage.skip_now()

    def outage(self) -> OutageView:
        return self._outage.view()

    @_guarded
    def put(self, key: str, value: Value) -> None:
        """Store `value` under `key` (a no-op when the key exists); retries -200 and -800 (`_retry_refused`)."""
        code = self._put(key, value)
        if code:
            self._retry_refused(
                code, lambda where: self._put(key, value, where), f"put {key!r}", (len(value),)
            )

    @_guarded
    def upsert(self, key: str, value: Value) -> None:
        """Store `value` under `key`, replacing any existing value (even a leased one); retries -200 and -800."""
        code = self._upsert(key, value)
        if code:
            self._retry_refused(
                code, lambda where: self._upsert(key, value, where), f"upsert {key!r}", (len(value),)
            )

    @_guarded
    def get(self, key: str) -> bytes | None:
        """The bytes under `key`, or None when the pool does not hold it. Grants the object a read lease."""
        value = self._get(key)
        if value:
            return value
        return self._confirm_missing(key)

    @_guarded
    def exists(self, key: str) -> bool:
        code = self._is_exist(key)
        if code == 1:
            return True
        if code == 0:
            return False
        raise self._error(code, f"exists {key!r}")

    @_guarded
    def remove(self, key: str, *, force: bool = False) -> bool:
        """True when `key` is gone afterwards (removed now or absent); False while a read lease holds it."""
        code = self._remove(key, force)
        if code == 0 or code == OBJECT_NOT_FOUND:
            return True
        if code == OBJECT_HAS_LEASE:
            return False
        raise self._error(code, f"remove {key!r}")

    @_guarded
    def put_batch(self, items: Mapping[str, Value]) -> None:
        """Store several values in one round trip; existing keys keep their values."""
        self._store_batch(self._put_batch, items, "put_batch")

    @_guarded
    def upsert_batch(self, items: Mapping[str, Value]) -> None:
        """Store several values in one round trip, replacing existing ones."""
        self._store_batch(self._upsert_batch, items, "upsert_batch")

    def _store_batch(
        self,
        native: Callable[[list[str], list[Value], ReplicateConfig], int],
        items: Mapping[str, Value],
        verb: str,
    ) -> None:
        if not items:
            return
        keys = list(items)
        values = list(items.values())
        code = native(keys, values, self._anywhere)
        if code:
            sizes = [len(value) for value in values]
            self._retry_refused(
                code, lambda where: native(keys, values, where), f"{verb} of {len(keys)} keys", sizes
            )

    @_guarded
    def get_batch(self, keys: Sequence[str]) -> list[bytes | None]:
        """Values in the order of `keys`, None for keys the pool does not hold."""
        if not keys:
            return []
        values: list[bytes | None] = self._get_batch(keys)
        if all(values):
            return values
        misses = [index for index, value in enumerate(values) if not value]
        present = self._exists_codes([keys[index] for index in misses], "get_batch")
        for index, code in zip(misses, present, strict=True):
            values[index] = self._confirm_missing(keys[index]) if code == 1 else None
        return values

    @_guarded
    def exists_batch(self, keys: Sequence[str]) -> list[bool]:
        if not keys:
            return []
        return [code == 1 for code in self._exists_codes(keys, "exists_batch")]

    @_guarded
    def remove_batch(self, keys: Sequence[str], *, force: bool = False) -> list[bool]:
        """Per key, as `remove`: True when gone afterwards, False while a read lease protects it."""
        if not keys:
            return []
        results = []
        for key, code in zip(keys, self._store.batch_remove(list(keys), force), strict=True):
            if code not in (0, OBJECT_NOT_FOUND, OBJECT_HAS_LEASE):
                raise self._error(code, f"remove_batch ({key!r})")
            results.append(code != OBJECT_HAS_LEASE)
        return results

    @_guarded
    def remove_matching(self, pattern: str, *, force: bool = False) -> int:
        """Remove every object whose key matches the regular expression `pattern`; how many were removed
        (objects under a read lease stay unless `force`)."""
        removed: int = self._store.remove_by_regex(pattern, force)
        if removed < 0:
            raise self._error(removed, f"remove_matching {pattern!r}")
        return removed

    def register_buffer(self, size: int) -> RegisteredBuffer:
        """Allocate `size` bytes and register them for `put_from` / `get_into`."""
        if size <= 0:
            raise ValueError(f"buffer size must be positive, got {size}")
        buffer = RegisteredBuffer(size)
        code = self._store.register_buffer(buffer.address, size)
        if code != 0:
            raise self._error(code, f"register_buffer of {size} bytes")
        buffer.registered = True
        self._buffers.append(buffer)
        return buffer

    def unregister_buffer(self, buffer: RegisteredBuffer) -> None:
        if buffer.registered:
            buffer.registered = False
            self._buffers.remove(buffer)
            self._store.unregister_buffer(buffer.address)

    @_guarded
    def put_from(self, key: str, buffer: RegisteredBuffer, size: int, *, offset: int = 0) -> None:
        """Store `size` bytes of `buffer` starting at `offset` under `key`, without copying them in Python."""
        self._check_span(buffer, offset, size)
        address = buffer.address + offset
        code = self._put_from(key, address, size)
        if code:
            self._retry_refused(
                code, lambda where: self._put_from(key, address, size, where), f"put_from {key!r}", (size,)
            )

    @_guarded
    def get_into(self, key: str, buffer: RegisteredBuffer, *, offset: int = 0) -> int | None:
        """Copy the object under `key` into `buffer` at `offset`; its size in bytes, or None when missing."""
        capacity = buffer.size - offset
        self._check_span(buffer, offset, capacity)
        size = self._get_into(key, buffer.address + offset, capacity)
        if size >= 0:
            return size
        if size == OBJECT_NOT_FOUND:
            return None
        if size == INVALID_PARAMS:
            needed = self._store.get_size(key)
            if needed > capacity:
                raise StoreError(
                    f"get_into {key!r}: the object is {needed} bytes but the buffer holds {capacity} from "
                    f"offset {offset}; register a larger buffer",
                    size,
                )
        raise self._error(size, f"get_into {key!r}")

    def close(self) -> None:
        """Unmount this client's segment (its objects leave the pool) and release the connection."""
        if self._closed:
            return
        for buffer in list(self._buffers):
            self.unregister_buffer(buffer)
        store = self._store
        self._closed = True
        self._bind(_ClosedStore())
        store.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _confirm_missing(self, key: str) -> bytes | None:
        """An empty read means missing or failed (Mooncake stores no empty values); ask the master which."""
        code = self._is_exist(key)
        if code == 0:
            return None
        if code != 1:
            raise self._error(code, f"get {key!r}")
        value = self._get(key)
        if value:
            return value
        size = self._store.get_size(key)
        if size > self._settings.local_buffer_size:
            raise StoreError(
                f"get {key!r}: the object is {size} bytes, more than this client's local_buffer_size "
                f"({self._settings.local_buffer_size}); raise kv_cache_pool_config.local_buffer_size"
            )
        raise StoreError(
            f"get {key!r}: the master lists the key but its bytes could not be read (is the client owning "
            "its segment still alive?); Mooncake's log lines above give the detail"
        )

    def _exists_codes(self, keys: Sequence[str], what: str) -> list[int]:
        codes: list[int] = self._batch_is_exist(list(keys))
        if min(codes) < 0:
            if not accepts_connections(*split_host_port(self.master_address), timeout_s=1.0):
                raise self._error(RPC_FAIL, what)
            raise StoreError(f"{what}: the master could not check {sum(code < 0 for code in codes)} keys", -1)
        return codes

    def _retry_refused(
        self, code: int, attempt: Callable[[ReplicateConfig], int], what: str, sizes: Sequence[int]
    ) -> None:
        """Retry a write while the pool is full (-200, with backoff until eviction frees space) or its placement
        failed (-800, at once: first on the client's own segment, then wherever the master places it). The loop
        stays here, not in a retry library: the first attempt is the caller's hot path."""
        started = time.monotonic()
        attempts = 1
        placements = 1
        where = self._anywhere
        while code == NO_AVAILABLE_HANDLE or (code == TRANSFER_FAIL and placements < PLACEMENT_ATTEMPTS):
            if code == TRANSFER_FAIL:
                placements += 1
                where = self._own_segment if placements == 2 and self._own_segment else self._anywhere
            else:
                delay = self._retry.next_delay(attempts, time.monotonic() - started)
                if delay is None:
                    raise StoreError(
                        f"{what}: the pool had no space (NO_AVAILABLE_HANDLE, -200) through {attempts} attempts "
                        f"over {time.monotonic() - started:.2f} s; objects read within default_kv_lease_ttl "
                        "cannot be evicted, so raise global_segment_size, lower eviction_high_watermark_ratio or "
                        "write less (a client with global_segment_size 0 needs another client's segment to write "
                        "into)",
                        code,
                    )
                time.sleep(delay)
            code = attempt(where)
            attempts += 1
        if code == 0:
            return
        if code == TRANSFER_FAIL:
            raise StoreError(
                f"{what}: {placements} placements failed to transfer (TRANSFER_FAIL, -800): the segments it "
                "was placed on could not be written; a client that died keeps its segment registered until "
                "its lease runs out, a live one may be unreachable on its transfer port",
                code,
            )
        if code == INVALID_PARAMS:
            if min(sizes) == 0:
                raise StoreError(f"{what}: Mooncake cannot store empty values", code)
            if max(sizes) > self._settings.local_buffer_size:
                raise StoreError(
                    f"{what}: a value of {max(sizes)} bytes exceeds this client's local_buffer_size "
                    f"({self._settings.local_buffer_size}); raise kv_cache_pool_config.local_buffer_size",
                    code,
                )
        raise self._error(code, what)

    def _error(self, code: int, what: str) -> StoreError:
        name = CODE_NAMES.get(code, "see Mooncake's error codes")
        if code == RPC_FAIL:
            return StoreUnavailable(
                f"{what}: mooncake_master at {self.master_address} did not answer ({name}, {code}); check "
                "that it is running",
                code,
            )
        return StoreError(f"{what} failed with Mooncake code {code} ({name})", code)

    @staticmethod
    def _check_span(buffer: RegisteredBuffer, offset: int, size: int) -> None:
        if not buffer.registered:
            raise ValueError("the buffer is not registered with this client; use StoreClient.register_buffer")
        if offset < 0 or size <= 0 or offset + size > buffer.size:
            raise ValueError(f"bytes [{offset}, {offset + size}) lie outside the {buffer.size}-byte buffer")
