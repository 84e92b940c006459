"""One client request on its way through engine legs: picking, load accounting, legs, cleanup.

Every leg's connection is tracked from the moment its request is written, so `abandon()` can close all of
them at once — closing a leg's connection is how it is cancelled at the engine.
"""

import asyncio
import json
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from motor.coordinator.registry import Target
from motor.coordinator.requests import ClientRequest
from motor.coordinator.scheduling.scheduler import Allocation
from motor.coordinator.shaping import prefill_body
from motor.coordinator.sse import EVENT_END, SseSplitter, carries_output
from motor.coordinator.upstream import UpstreamConnection, UpstreamError

if TYPE_CHECKING:
    from motor.coordinator.core import Core

ERROR_EVENT_PREFIX = b'data: {"error"'
ENGINE_MESSAGE_LIMIT = 500


class LegFailure(Exception):
    """A leg failed; `retryable` while nothing reached the client and another attempt may succeed."""

    def __init__(
        self,
        role: str,
        target: Target | None,
        reason: str,
        message: str,
        *,
        status: int = 502,
        retryable: bool = True,
        error_type: str = "upstream_error",
    ) -> None:
        super().__init__(message)
        self.role = role
        self.target = target
        self.reason = reason
        self.message = message
        self.status = status
        self.retryable = retryable
        self.error_type = error_type


def no_instance(role: str, message: str, reason: str = "no_instance") -> LegFailure:
    """No instance can take the role right now: retried with backoff, as the controller may be replacing it."""
    return LegFailure(role, None, reason, message, status=503, error_type="service_unavailable")


class EngineRejected(Exception):
    """The engine refused the request itself (a 4xx other than 408/429): another instance would too."""

    def __init__(self, status: int, body: bytes, content_type: bytes) -> None:
        super().__init__(f"engine answered {status}")
        self.status = status
        self.body = body
        self.content_type = content_type


@dataclass(slots=True)
class PrefillResult:
    raw: bytes
    kv_transfer_params: dict[str, Any] | None
    cached_tokens: int


@dataclass(slots=True)
class Opened:
    """The client-facing leg once its first output (stream: the events up to and with it) or its whole body
    (not stream) arrived."""

    target: Target
    connection: UpstreamConnection
    first: bytes
    splitter: SseSplitter | None
    opened_at: float


def new_request_id() -> str:
    return secrets.token_hex(16)


def _describe(target: Target) -> str:
    return f"{target.role} instance {target.instance_id} ({target.host}:{target.port})"


def _retryable_status(status: int) -> bool:
    return status >= 500 or status in (408, 429)


class Dispatch:
    def __init__(self, core: "Core", request: ClientRequest, request_id: str) -> None:
        self.core = core
        self.request = request
        self.request_id = request_id
        self.rid = request_id.encode()
        self.engine_rid = self.rid
        self.loop = core.loop
        self.arrival = time.perf_counter()
        self.deadline = self.loop.time() + core.config.exception_config.infer_timeout
        self.excluded: dict[str, set[str]] = {"prefill": set(), "decode": set(), "union": set()}
        self.legs: list[UpstreamConnection] = []
        self.allocations: list[Allocation] = []
        self.prefill_allocation: Allocation | None = None
        self.cached_tokens: int | None = None
        self.pd = False
        self.prefill_done_at: float | None = None
        self.companion: asyncio.Task[PrefillResult] | None = None
        self.waited = 0.0
        self.extra_overhead = 0.0
        self.abort_reason: str | None = None
        self.task: asyncio.Task[Any] | None = None
        self.finished = False
        self.sending_since = 0.0
        self.leg_started = self.arrival

    # ---- deadlines -----------------------------------------------------------------------------------------

    def first_token_deadline(self) -> float:
        return min(self.loop.time() + self.core.config.exception_config.first_token_timeout, self.deadline)

    def prefill_deadline(self, first_token_deadline: float) -> float:
        return min(self.loop.time() + self.core.config.timeout_config.request_timeout, first_token_deadline)

    # ---- instances and load --------------------------------------------------------------------------------

    def pick(self, role: str) -> Target:
        scheduler = self.core.scheduler
        target = scheduler.pick(role, self.request.demand, self.excluded[role])  # type: ignore[arg-type]
        if target is None and self.excluded[role]:
            # Every instance of the role already failed this request: try again where it failed.
            target = scheduler.pick(role, self.request.demand)  # type: ignore[arg-type]
        if target is None:
            raise no_instance(role, f"no {role} instance is registered")
        return target

    def allocate(self, target: Target, tokens: float, kv: float) -> Allocation:
        allocation = self.core.scheduler.allocate(target, tokens, kv)
        self.allocations.append(allocation)
        return allocation

    # ---- legs ----------------------------------------------------------------------------------------------

    async def call(
        self, target: Target, body: bytes, head_deadline: float, *, whole: bool = False
    ) -> UpstreamConnection:
        """Send a leg and wait for its response head (`whole`: the whole response, for non-stream legs);
        non-200 answers become LegFailure or EngineRejected."""
        head = (
            b"POST %b HTTP/1.1\r\nhost: %b\r\ncontent-type: application/json\r\nx-request-id: %b\r\n"
            b"content-length: %d\r\n\r\n"
            % (self.request.path, target.host_header, self.engine_rid, len(body))
        )
        started = time.perf_counter()
        try:
            connection = await self.core.pool.request(
                target.host,
                target.port,
                head,
                body,
                head_deadline=head_deadline,
                track=self.legs,
                whole_silence=self.core.config.timeout_config.read_timeout if whole else None,
            )
        except UpstreamError as exc:
            raise self.failure(target, exc) from None
        finally:
            self.waited += time.perf_counter() - started
        if connection.status == 200:
            return connection
        raw = await self.read_body(connection, target, self.deadline)
        self.finish_leg(connection)
        if _retryable_status(connection.status):
            raise LegFailure(
                target.role,
                target,
                f"http_{connection.status}",
                f"{_describe(target)} answered {connection.status}: {_engine_message(raw)}",
            )
        raise EngineRejected(
            connection.status, raw, connection.header(b"content-type") or b"application/json"
        )

    async def read_chunk(
        self, connection: UpstreamConnection, target: Target, deadline: float, silence: float = 0.0
    ) -> bytes | None:
        started = time.perf_counter()
        try:
            return await connection.next_chunk(deadline, silence)
        except UpstreamError as exc:
            raise self.failure(target, exc) from None
        finally:
            self.waited += time.perf_counter() - started

    async def read_body(self, connection: UpstreamConnection, target: Target, deadline: float) -> bytes:
        started = time.perf_counter()
        try:
            return await connection.read_body(deadline, self.core.config.timeout_config.read_timeout)
        except UpstreamError as exc:
            raise self.failure(target, exc) from None
        finally:
            self.waited += time.perf_counter() - started

    def finish_leg(self, connection: UpstreamConnection) -> None:
        """A leg that ended normally: its connection goes back to the pool, untracked."""
        if connection in self.legs:
            self.legs.remove(connection)
        connection.release()

    async def prefill(
        self, target: Target, kv_transfer_params: dict[str, Any] | None, deadline: float, **extra: Any
    ) -> PrefillResult:
        prompt = self.request.demand.prompt_tokens
        allocation = self.allocate(target, prompt, prompt)
        self.prefill_allocation = allocation
        body = prefill_body(self.request.body, kv_transfer_params, **extra)
        started = time.perf_counter()
        connection = await self.call(target, body, deadline, whole=True)
        raw = await self.read_body(connection, target, deadline)
        self.finish_leg(connection)
        allocation.release_tokens()
        try:
            response = json.loads(raw)
        except ValueError:
            raise LegFailure(
                "prefill", target, "invalid_json", f"{_describe(target)} answered invalid JSON"
            ) from None
        if not isinstance(response, dict):
            raise LegFailure("prefill", target, "invalid_json", f"{_describe(target)} answered a non-object")
        self.prefill_done_at = time.perf_counter()
        self.core.metrics.observe_leg("prefill", self.prefill_done_at - started)
        params = response.get("kv_transfer_params")
        usage = response.get("usage") if isinstance(response.get("usage"), dict) else {}
        details = (
            usage.get("prompt_tokens_details") if isinstance(usage.get("prompt_tokens_details"), dict) else {}
        )
        cached = details.get("cached_tokens") if isinstance(details.get("cached_tokens"), int) else 0
        return PrefillResult(raw, params if isinstance(params, dict) else None, cached)

    async def open_client_leg(self, target: Target, body: bytes, first_token_deadline: float) -> Opened:
        """Send the leg whose output the client sees; return once its first output (or whole body) arrived."""
        stream = self.request.stream
        self.leg_started = time.perf_counter()
        if not stream:
            connection = await self.call(target, body, self.deadline, whole=True)
            raw = await self.read_body(connection, target, self.deadline)
            return self._opened(target, connection, raw, None)
        connection = await self.call(target, body, first_token_deadline)
        splitter = SseSplitter()
        # Events before the first output (the chat role chunk) are held back: until output exists nothing
        # reaches the client, so a failure stays retryable and the next attempt's events are the only ones.
        held = b""
        silence = 0.0
        while True:
            chunk = await self.read_chunk(connection, target, first_token_deadline, silence)
            if chunk is None:
                raise LegFailure(
                    target.role,
                    target,
                    "empty_stream",
                    f"{_describe(target)} ended its stream without any output",
                )
            events = splitter.feed(chunk)
            if not events:
                continue
            for event in events.split(EVENT_END):
                if event.startswith(ERROR_EVENT_PREFIX):
                    raise LegFailure(
                        target.role,
                        target,
                        "error_event",
                        f"{_describe(target)} streamed an error first: {_engine_message(event[6:])}",
                    )
                if event and carries_output(event):
                    return self._opened(target, connection, held + events, splitter)
            held += events
            silence = self.core.config.timeout_config.read_timeout

    def _opened(
        self, target: Target, connection: UpstreamConnection, first: bytes, splitter: SseSplitter | None
    ) -> Opened:
        if self.prefill_allocation is not None:
            # The decode side has the KV now (it produced output): the prefill side no longer holds it for us.
            self.prefill_allocation.release_kv()
        if self.prefill_done_at is not None:
            self.core.metrics.observe_leg("kv_wait", time.perf_counter() - self.prefill_done_at)
        return Opened(target, connection, first, splitter, time.perf_counter())

    # ---- cleanup -------------------------------------------------------------------------------------------

    def end_attempt(self, reason: str) -> None:
        """Close the failed attempt's legs and forget what it learnt: the next one may take another flow."""
        self.abandon(reason)
        self.pd = False
        self.cached_tokens = None
        self.prefill_done_at = None

    def abandon(self, reason: str) -> None:
        """Close every leg still open and release every allocation (end of an attempt or of the request)."""
        if self.companion is not None and not self.companion.done():
            self.companion.cancel()
        self.companion = None
        if self.legs:
            for connection in self.legs:
                if not connection.complete and not connection.closed:
                    self.core.metrics.cancelled_legs.labels(reason).inc()
                connection.abort()
            self.legs.clear()
        for allocation in self.allocations:
            allocation.release()
        self.allocations.clear()
        self.prefill_allocation = None

    def expire(self, reason: str) -> None:
        """End the request from outside its task (client gone, write stalled, infer_timeout)."""
        if self.finished or self.abort_reason is not None:
            return
        self.abort_reason = reason
        self.abandon(reason)
        if self.task is not None:
            self.task.cancel()

    def failure(self, target: Target, exc: UpstreamError) -> LegFailure:
        status = 504 if exc.kind == "timeout" else 502
        return LegFailure(target.role, target, exc.kind, f"{_describe(target)}: {exc}", status=status)


def _engine_message(raw: bytes) -> str:
    try:
        payload = json.loads(raw)
    except ValueError:
        return raw[:ENGINE_MESSAGE_LIMIT].decode(errors="replace")
    if isinstance(payload, dict):
        error = payload.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return error["message"][:ENGINE_MESSAGE_LIMIT]
        if isinstance(error, str):
            return error[:ENGINE_MESSAGE_LIMIT]
        if isinstance(payload.get("message"), str):
            return payload["message"][:ENGINE_MESSAGE_LIMIT]
    return raw[:ENGINE_MESSAGE_LIMIT].decode(errors="replace")
