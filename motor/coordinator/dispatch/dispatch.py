"""One client request in the coordinator, across its attempts: identity, deadline, the instances that already
failed it, the accounting of time spent waiting, and ends imposed from outside (`expire`).

What happens to the request on its way through engines is its current `Attempt` (`attempt.py`).
"""

import asyncio
import os
import time
from typing import Any

from motor.coordinator.client_request import ClientRequest
from motor.coordinator.dispatch.attempt import Attempt
from motor.coordinator.dispatch.context import DispatchContext
from motor.coordinator.dispatch.failed_instances import FailedInstances
from motor.coordinator.dispatch.failures import ABORTS

_NOTHING_EXCLUDED: frozenset[str] = frozenset()


_ID_BYTES = 16
_IDS_PER_DRAW = 256
_random_ids: list[str] = []


def new_request_id() -> str:
    """128 random bits as hex, drawn from the OS's CSPRNG 256 ids at a time (one syscall, not one per request)."""
    if not _random_ids:
        pool = os.urandom(_ID_BYTES * _IDS_PER_DRAW).hex()
        step = 2 * _ID_BYTES
        _random_ids.extend(pool[i : i + step] for i in range(0, len(pool), step))
    return _random_ids.pop()


class Dispatch:
    __slots__ = (
        "_extra_overhead",
        "_failed",
        "_sending_since",
        "_task",
        "_waited",
        "abort_kind",
        "arrival",
        "attempt",
        "client_rid",
        "closed",
        "context",
        "deadline",
        "log_transitions",
        "loop",
        "replays",
        "request",
        "request_id",
        "rid",
        "span",
    )

    def __init__(
        self,
        context: DispatchContext,
        request: ClientRequest,
        request_id: str,
        client_rid: bytes | None = None,
    ) -> None:
        """`request_id`: motor's own id, the base of every engine request id. `client_rid`: the client's
        X-Request-Id, only echoed back and logged (two clients may send the same one)."""
        self.context = context
        self.request = request
        self.request_id = request_id
        self.client_rid = client_rid
        # the X-Request-Id answered to the client: its own, else motor's
        self.rid = client_rid or request_id.encode()
        self.log_transitions = context.observer.logs_transitions()
        self.loop = context.loop
        self.arrival = time.perf_counter()
        self.deadline = self.loop.time() + context.limits.exceptions.infer_timeout
        self.attempt: Attempt | None = None
        self.abort_kind: str | None = None
        self.closed = False
        self.replays = 0  # times the stream was replayed after its output started (`replay.py`)
        self.span: Any = None  # the request's trace span, when tracing is on
        self._failed: dict[str, FailedInstances] | None = None
        self._waited = 0.0
        self._extra_overhead = 0.0
        self._sending_since = 0.0
        self._task: asyncio.Task[Any] | None = None

    @property
    def label(self) -> str:
        """The request in logs: motor's id, and the client's when it sent one."""
        if self.client_rid is None:
            return self.request_id
        return f"{self.request_id} (client id {self.client_rid.decode()})"

    def new_attempt(self) -> Attempt:
        """The next attempt; a replay starts over from attempt 0 (`replay.py` clears `attempt` first)."""
        number = 0 if self.attempt is None else self.attempt.number + 1
        attempt = self.attempt = Attempt(self, number)
        return attempt

    # ---- instances that failed this request ----------------------------------------------------------------

    def excluded(self, role: str) -> set[str] | frozenset[str]:
        failed = self.failed(role)
        return _NOTHING_EXCLUDED if failed is None else failed.all

    def failed(self, role: str) -> FailedInstances | None:
        return None if self._failed is None else self._failed.get(role)

    def exclude(self, role: str, instance_id: str, gone: bool = False) -> None:
        """`instance_id` failed the request; `gone`: it refused the connection or dropped it (likely dead)."""
        if self._failed is None:
            self._failed = {}
        self._failed.setdefault(role, FailedInstances()).add(instance_id, gone)

    # ---- where the time goes -------------------------------------------------------------------------------

    def add_wait(self, seconds: float) -> None:
        """Time spent waiting on an engine or a backoff, not working (kept out of the overhead metric)."""
        self._waited += seconds

    def wait_mark(self) -> float:
        return self._waited

    def parallel_waits(self, mark: float, seconds: float) -> None:
        """Legs waited at once since `mark`: count the section's wall time once, not each leg's waits."""
        self._waited = mark + seconds

    def callback_served(self, mark: float, started: float) -> None:
        """A decode_first callback ran the prefill while the request's task waited on the decode leg: its
        engine waits are already counted there, its own work counts as coordinator time."""
        callback_waits = self._waited - mark
        self._waited = mark
        self._extra_overhead += max(0.0, time.perf_counter() - started - callback_waits)

    def overhead(self, elapsed: float) -> float:
        return max(0.0, elapsed - self._waited + self._extra_overhead)

    async def backoff(self, delay: float) -> None:
        started = time.perf_counter()
        await asyncio.sleep(delay)
        self._waited += time.perf_counter() - started

    # ---- the client side -----------------------------------------------------------------------------------

    def sending(self, now: float) -> None:
        """A send to the client began (the sweeper ends the request if it blocks beyond write_timeout)."""
        self._sending_since = now

    def sent(self) -> None:
        self._sending_since = 0.0

    @property
    def send_pending(self) -> bool:
        return self._sending_since > 0.0

    @property
    def finished(self) -> bool:
        return self.closed or (self.attempt is not None and self.attempt.response_ended)

    # ---- ends ----------------------------------------------------------------------------------------------

    def attach(self, task: "asyncio.Task[Any]") -> None:
        """The task serving the request: `expire` cancels it."""
        self._task = task

    def expiry(self, now: float, loop_now: float, write_timeout: float) -> str | None:
        """Why the sweeper should end the request now, if it should (an `ABORTS` kind)."""
        if self._sending_since and now - self._sending_since > write_timeout:
            return "write_timeout"
        if loop_now > self.deadline:
            return "infer_timeout"
        return None

    def client_gone(self) -> None:
        """The client's connection went away."""
        self.expire("client_gone")

    def expire(self, kind: str) -> None:
        """End the request from outside its task (an `ABORTS` kind: client gone, write stalled, infer_timeout,
        shutdown): every leg closes now and the task is cancelled."""
        if self.finished or self.abort_kind is not None:
            return
        self.abort_kind = kind
        if self.attempt is not None:
            self.attempt.abort(ABORTS[kind].label)
        if self._task is not None:
            self._task.cancel()

    def close(self) -> None:
        """The request ended: close whatever its last attempt still holds."""
        self.closed = True
        if self.attempt is not None:
            self.attempt.abandon("request ended")

    def release(self) -> None:
        """After `close()`, once nothing reads the attempt any more: break the request's reference cycles
        (request ⇄ attempt ⇄ legs, request → its own task) so its objects go as soon as they are unused."""
        attempt, self.attempt, self._task = self.attempt, None, None
        if attempt is not None:
            attempt.forget_legs()
