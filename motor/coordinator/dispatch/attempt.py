"""One attempt of a request and its legs: the state machine of `states.py`, and the engine calls that drive it.

Flows (`flows.py`) pick endpoints and start legs through the attempt; the relay ends it (`finish`,
`stream_failed`); the retry loop settles a failure (`fail`, by the rules of `failures.py`). Nothing else changes
an attempt's state.

Every leg's connection is tracked from the moment its request is written, so aborting a leg (or the whole
attempt) closes it at once — closing a leg's connection is how it is cancelled at the engine.
"""

import asyncio
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from motor.coordinator.dispatch.deadlines import prefill_budget
from motor.coordinator.dispatch.failures import (
    EngineRejected,
    LegFailure,
    describe,
    engine_message,
    no_instance,
    overloaded,
    retryable_status,
    settle,
)
from motor.coordinator.dispatch.shaping import encode_body, prefill_body
from motor.coordinator.dispatch.states import (
    ABORTED,
    ADMITTED,
    DECODE,
    DONE,
    ENCODE,
    FAILED,
    HANDOVER,
    LEG_ABORTED,
    LEG_DONE,
    LEG_FAILED,
    LEG_NEXT,
    OBSERVED_LEG_STATES,
    OBSERVED_PHASES,
    PHASE_NEXT,
    PICKED,
    PREFILL,
    RECEIVING,
    RETRYING,
    SENT,
    STREAMING,
    InvalidTransition,
    LegState,
    Phase,
)
from motor.coordinator.http import jsonio
from motor.coordinator.http.sse import EVENT_END, SseSplitter, carries_output
from motor.coordinator.http.upstream import UpstreamConnection, UpstreamError
from motor.coordinator.registry import Target
from motor.coordinator.scheduling.scheduler import Allocation
from motor.runtime.backoff import Backoff

if TYPE_CHECKING:
    # import cycle: type hints only — the Dispatch that owns this attempt
    from motor.coordinator.dispatch.dispatch import Dispatch

    # import cycle: type hints only — the flow that drives this attempt
    from motor.coordinator.dispatch.flows import Flow

ERROR_EVENT_PREFIX = b'data: {"error"'
_ENDED_LEG = frozenset({LEG_DONE, LEG_FAILED, LEG_ABORTED})
_ENDED_PHASE = frozenset({DONE, FAILED, RETRYING, ABORTED})


@dataclass(slots=True)
class PrefillResult:
    raw: bytes
    kv_transfer_params: dict[str, Any] | None
    cached_tokens: int


class Leg:
    """One engine request of an attempt: an encode leg, a prefill leg, or the client-facing leg (decode or
    aggregated).

    `deadline` bounds its answer (prefill: the whole response; client-facing: the first output), `abort()`
    closes it wherever it is — the seams for per-leg deadlines and hedged legs. A prefill leg whose own budget
    (`deadlines.py`) ends before the request's limits has `budget` > 0: missing that deadline is a stall, the
    `prefill_stalled` failure, rather than a timeout; `work` is the prefill work its instance had when the leg
    was placed (what the instance's measured rate is per)."""

    __slots__ = (
        "allocation",
        "attempt",
        "budget",
        "client",
        "connection",
        "connections",
        "deadline",
        "first",
        "role",
        "sent_at",
        "since",
        "span",
        "splitter",
        "state",
        "target",
        "task",
        "work",
    )

    def __init__(
        self, attempt: "Attempt", target: Target, allocation: Allocation, deadline: float, client: bool
    ) -> None:
        self.attempt = attempt
        self.role = target.role
        self.target = target
        self.allocation = allocation
        self.deadline = deadline
        self.budget = 0.0
        self.work = 0.0
        self.client = client
        self.state = PICKED
        self.since = time.perf_counter()
        self.sent_at = 0.0
        self.connections: list[UpstreamConnection] = []
        self.connection: UpstreamConnection | None = None
        self.task: asyncio.Task[PrefillResult] | None = None
        self.first = b""
        self.splitter: SseSplitter | None = None
        self.span: Any = None  # its trace span, when tracing is on

    @property
    def ended(self) -> bool:
        return self.state in _ENDED_LEG

    def _move(self, new: LegState) -> None:
        old = self.state
        if new not in LEG_NEXT[old]:
            raise InvalidTransition(f"{self.role} leg: {old.name} → {new.name}")
        now = time.perf_counter()
        self.state = new
        attempt = self.attempt
        if new in OBSERVED_LEG_STATES or attempt.dispatch.log_transitions:
            attempt.observer.leg_changed(self, old, new, now - self.since)
        self.since = now
        if new is LEG_DONE:
            circuits = self.attempt.context.circuits
            if circuits is not None:
                circuits.report(self.target.instance_id, True)
        if self.span is not None and new in _ENDED_LEG:
            tracer = self.attempt.context.tracer
            assert tracer is not None
            tracer.end(self.span, {"motor.leg.state": new.name})

    def _advance(self, new: LegState) -> None:
        """Move on from an engine event, unless the coordinator closed the leg while its task was resuming (a
        concurrent leg, a callback's prefill): then it ends like a read on the closed connection would."""
        if self.state in _ENDED_LEG:
            raise self.failed("cancelled", f"{describe(self.target)}: the leg was closed by the coordinator")
        self._move(new)

    # ---- outcomes ------------------------------------------------------------------------------------------

    def failed(self, kind: str, message: str, *, reason: str | None = None) -> LegFailure:
        """The leg failed: the failure to raise (the attempt's cause, unless the leg was already closed)."""
        return self._record(LegFailure(kind, self.role, self.target, message, reason=reason))

    def upstream_failed(self, exc: UpstreamError) -> LegFailure:
        if exc.kind == "timeout" and self.budget and self.attempt.dispatch.loop.time() >= self.deadline:
            return self.stalled()
        return self.failed(exc.kind, f"{describe(self.target)}: {exc}")

    def stalled(self) -> LegFailure:
        """The prefill leg missed its own deadline: the instance counts a stall, the request moves on."""
        rate = self.allocation.endpoint.prefill_rate
        measured = (
            f"{rate.tokens_per_second:,.0f} tokens/s measured over {rate.samples} legs"
            if rate.tokens_per_second is not None
            else "no rate measured yet"
        )
        message = (
            f"{describe(self.target)}: no prefill answer within the leg's deadline ({self.budget:.3g} s for "
            f"{self.work:,.0f} tokens of prefill work, {measured})"
        )
        if not self.ended:
            self.attempt.context.scheduler.prefill_stalled(self.allocation.endpoint)
            self.attempt.observer.prefill_stalled(self)
        return self.failed("prefill_stalled", message)

    def _record(self, failure: LegFailure) -> LegFailure:
        if not self.ended:
            if self.span is not None:
                self.attempt.context.tracer.fail(self.span, failure.reason)  # type: ignore[union-attr]
            self._move(LEG_FAILED)
            circuits = self.attempt.context.circuits
            if circuits is not None and failure.rule.breaks_circuit:
                circuits.report(self.target.instance_id, False)
            self.attempt._note_cause(failure)
        return failure

    def abort(self, reason: str) -> None:
        """Close the leg now (its engine drops the request); its load is released with the attempt."""
        if self.task is not None and not self.task.done():
            self.task.cancel()
        if self.connections:
            self.close_connections(reason)
        if self.state not in _ENDED_LEG:
            self._move(LEG_ABORTED)

    def close_connections(self, reason: str) -> None:
        for connection in self.connections:
            if not connection.complete and not connection.closed:
                self.attempt.observer.leg_cancelled(self, reason)
            connection.abort()
        self.connections.clear()

    def release_connection(self, connection: UpstreamConnection) -> None:
        """An exchange that ended normally: its connection goes back to the pool, untracked."""
        if connection in self.connections:
            self.connections.remove(connection)
        connection.release()

    # ---- engine calls --------------------------------------------------------------------------------------

    async def send(self, body: bytes, head_deadline: float, *, whole: bool = False) -> UpstreamConnection:
        """Send the leg and wait for its response head (`whole`: the whole response, for non-stream legs, then
        taken with `whole_body()`); non-200 answers become LegFailure or EngineRejected."""
        attempt = self.attempt
        dispatch = attempt.dispatch
        context = attempt.context
        target = self.target
        trace = b""
        if self.span is not None:
            trace = b"traceparent: %b\r\n" % context.tracer.traceparent(self.span)  # type: ignore[union-attr]
        head = (
            b"POST %b HTTP/1.1\r\nhost: %b\r\ncontent-type: application/json\r\nx-request-id: %b\r\n"
            b"%bcontent-length: %d\r\n\r\n"
            % (dispatch.request.path, target.host_header, attempt.engine_rid, trace, len(body))
        )
        self._advance(SENT)
        self.sent_at = self.since
        attempt._leg_sent(self)
        started = time.perf_counter()
        try:
            connection = await context.upstream.request(
                target.host,
                target.port,
                head,
                body,
                head_deadline=head_deadline,
                track=self.connections,
                whole_silence=context.limits.timeouts.read_timeout if whole else None,
            )
        except UpstreamError as exc:
            raise self.upstream_failed(exc) from None
        finally:
            dispatch.add_wait(time.perf_counter() - started)
        if connection.status == 200:
            self.connection = connection
            return connection
        raw = connection.whole_body() if whole else await self.read_body(connection, dispatch.deadline)
        self.release_connection(connection)
        status = connection.status
        if retryable_status(status):
            raise self.failed(
                "http_status",
                f"{describe(target)} answered {status}: {engine_message(raw)}",
                reason=f"http_{status}",
            )
        raise self._record(
            EngineRejected(
                self.role, target, status, raw, connection.header(b"content-type") or b"application/json"
            )
        )

    async def read_chunk(self, deadline: float, silence: float = 0.0) -> bytes | None:
        assert self.connection is not None
        started = time.perf_counter()
        try:
            return await self.connection.next_chunk(deadline, silence)
        except UpstreamError as exc:
            raise self.upstream_failed(exc) from None
        finally:
            self.attempt.dispatch.add_wait(time.perf_counter() - started)

    async def read_body(self, connection: UpstreamConnection, deadline: float) -> bytes:
        dispatch = self.attempt.dispatch
        started = time.perf_counter()
        try:
            return await connection.read_body(deadline, self.attempt.context.limits.timeouts.read_timeout)
        except UpstreamError as exc:
            raise self.upstream_failed(exc) from None
        finally:
            dispatch.add_wait(time.perf_counter() - started)


class Attempt:
    __slots__ = (
        "cached_tokens",
        "cause",
        "client",
        "context",
        "dispatch",
        "engine_rid",
        "failure",
        "first_token_deadline",
        "legs",
        "number",
        "observer",
        "output_at",
        "pd",
        "phase",
        "prefill",
        "since",
        "span",
    )

    def __init__(self, dispatch: "Dispatch", number: int) -> None:
        context = dispatch.context
        self.dispatch = dispatch
        self.context = context
        self.observer = context.observer
        self.number = number
        self.pd = False
        # Engine request ids are motor's alone (never the client's X-Request-Id: two clients could collide).
        # A retry may land where a cancelled leg of this request is still being torn down; engines refuse a
        # request id they still hold, so later attempts carry their own.
        rid = dispatch.request_id
        if dispatch.replays:
            rid = f"{rid}-replay{dispatch.replays}"
        self.engine_rid = rid.encode() if number == 0 else f"{rid}-retry{number}".encode()
        self.phase = ADMITTED
        self.since = time.perf_counter()
        self.first_token_deadline = min(
            dispatch.loop.time() + context.limits.exceptions.first_token_timeout, dispatch.deadline
        )
        self.legs: list[Leg] = []
        self.client: Leg | None = None
        self.prefill: Leg | None = None
        self.cause: LegFailure | None = None
        self.failure: LegFailure | None = None
        self.cached_tokens: int | None = None
        self.output_at = 0.0
        tracer = context.tracer
        self.span: Any = None
        if tracer is not None and dispatch.span is not None:
            self.span = tracer.child(
                dispatch.span, "attempt", {"motor.attempt": number, "motor.replay": dispatch.replays}
            )

    def run(self, flow: "Flow") -> Awaitable[None]:
        """Run `flow`: awaited, it returns once the client-facing leg produced output (STREAMING) or raises."""
        self.pd = flow.pd
        return flow.run(self)

    def _enter(self, new: Phase) -> None:
        old = self.phase
        if new not in PHASE_NEXT[old]:
            raise InvalidTransition(f"attempt {self.number}: {old.name} → {new.name}")
        now = time.perf_counter()
        self.phase = new
        if new in OBSERVED_PHASES or self.dispatch.log_transitions:
            self.observer.phase_changed(self, old, new, now - self.since)
        self.since = now
        if self.span is not None:
            self._trace_phase(new)

    def _trace_phase(self, new: Phase) -> None:
        tracer = self.context.tracer
        assert tracer is not None
        if new is STREAMING:
            self.span.add_event("first output")
            self.dispatch.span.add_event("first output", {"motor.attempt": self.number})
        elif new in _ENDED_PHASE:
            if self.failure is not None:
                tracer.fail(self.span, self.failure.reason)
            tracer.end(self.span, {"motor.phase": new.name, "motor.pd": self.pd})

    @property
    def response_ended(self) -> bool:
        """The relay finished the client's response (normally or with an error event)."""
        return self.output_at > 0.0 and self.phase in (DONE, FAILED)

    # ---- deadlines -----------------------------------------------------------------------------------------

    def prefill_deadline(self) -> float:
        """A prefill leg's whole answer: within request_timeout from now and the attempt's first-token deadline."""
        request_timeout = self.context.limits.timeouts.request_timeout
        return min(self.dispatch.loop.time() + request_timeout, self.first_token_deadline)

    def is_last(self) -> bool:
        """No retry would follow this attempt's failure (`exception_config.max_retry` used up)."""
        return self.context.limits.retry_policy.exhausted(self.number + 1)

    # ---- instances and legs --------------------------------------------------------------------------------

    async def pick(self, role: str) -> Target:
        target = self._pick_now(role)
        if target is None and self.context.scheduler.saturated(role):  # type: ignore[arg-type]
            target = await self._wait_for_room(role)
        if target is None:
            raise no_instance(role, f"no {role} instance is registered")
        return target

    def _pick_now(self, role: str) -> Target | None:
        dispatch = self.dispatch
        scheduler = self.context.scheduler
        demand = dispatch.request.demand
        failed = dispatch.failed(role)
        if failed is None:
            return scheduler.pick(role, demand)  # type: ignore[arg-type]
        target = scheduler.pick(role, demand, failed.all)  # type: ignore[arg-type]
        for avoid in failed.fallbacks() if target is None else ():
            # every instance of the role failed this request already: try again where it failed
            target = scheduler.pick(role, demand, avoid)  # type: ignore[arg-type]
            if target is not None:
                break
        return target

    async def _wait_for_room(self, role: str) -> Target | None:
        """Every instance of the role is at its admission bound: wait until load is released and a pick
        succeeds, within `admission_queue_timeout`; then the request is refused as overloaded."""
        dispatch = self.dispatch
        scheduler = self.context.scheduler
        loop = dispatch.loop
        timeout = self.context.limits.admission_queue_timeout
        deadline = min(loop.time() + timeout, self.first_token_deadline)
        while (remaining := deadline - loop.time()) > 0:
            room: asyncio.Future[None] = loop.create_future()
            scheduler.when_released(partial(_wake, room))
            try:
                async with asyncio.timeout(remaining):  # not wait_for: it can swallow a cancellation on 3.11
                    await room
            except TimeoutError:
                break
            target = self._pick_now(role)
            if target is not None:
                return target
            if not scheduler.saturated(role):  # type: ignore[arg-type]
                return None
        raise overloaded(
            role,
            f"every {role} instance stayed at its admission bound for {timeout:g} s "
            "(motor_coordinator_config.scheduler_config.admission_max_prefill_tokens / "
            "admission_max_decode_requests, admission_queue_timeout); retry shortly or add instances",
        )

    def _leg(self, target: Target, tokens: float, kv: float, deadline: float, client: bool) -> Leg:
        allocation = self.context.scheduler.allocate(target, tokens, kv)
        leg = Leg(self, target, allocation, deadline, client)
        self.legs.append(leg)
        if self.span is not None:
            leg.span = self.context.tracer.child(  # type: ignore[union-attr]
                self.span,
                target.role,
                {
                    "motor.instance_id": target.instance_id,
                    "server.address": target.host,
                    "server.port": target.port,
                    "motor.client_facing": client,
                },
                client=True,
            )
        return leg

    def client_leg(self, target: Target, tokens: float, kv: float) -> Leg:
        """The leg whose output the client sees; its load (`tokens` to compute, `kv` held) lasts to the end."""
        dispatch = self.dispatch
        deadline = self.first_token_deadline if dispatch.request.stream else dispatch.deadline
        leg = self.client = self._leg(target, tokens, kv, deadline, True)
        return leg

    def prefill_leg(self, target: Target) -> Leg:
        """A prefill leg bounded by its own budget when that ends before the request's limits do — except on
        the last attempt `max_retry` allows: a stalled leg is moved to spare the request the wait, and with no
        attempt left to move it to, cutting it short would only turn a slow answer into an error."""
        dispatch = self.dispatch
        demand = dispatch.request.demand
        limit = self.prefill_deadline()
        leg = self.prefill = self._leg(target, demand.prefill_tokens, demand.prompt_tokens, limit, False)
        endpoint = leg.allocation.endpoint
        leg.work = endpoint.tokens
        if self.is_last():
            return leg
        budget = prefill_budget(self.context.limits.timeouts, leg.work, endpoint.prefill_rate)
        if dispatch.loop.time() + budget < limit:
            leg.deadline = dispatch.loop.time() + budget
            leg.budget = budget
        return leg

    def _leg_sent(self, leg: Leg) -> None:
        if leg.client:
            if self.phase is ADMITTED or self.phase is ENCODE:
                self._enter(DECODE)
        elif leg.role == "encode":
            self._enter(ENCODE)
        elif self.phase in (ADMITTED, ENCODE, DECODE):
            self._enter(PREFILL)

    def _note_cause(self, failure: LegFailure) -> None:
        """The attempt's first failure is its cause; failures of legs closed because of it are consequences."""
        if self.cause is None:
            self.cause = failure

    # ---- the encode leg ------------------------------------------------------------------------------------

    async def run_encode(self) -> None:
        """The encode leg, before any other: an encode instance (the least outstanding encode score) computes the
        request's media; its answer is discarded. Its load is the request's encode score until it answered."""
        request = self.dispatch.request
        work = request.encode
        assert work is not None
        leg = self._leg(await self.pick("encode"), work.score, 0.0, self.prefill_deadline(), False)
        if leg.span is not None:
            leg.span.set_attributes({"motor.encode.items": len(work.items), "motor.encode.score": work.score})
        connection = await leg.send(encode_body(request.body), leg.deadline, whole=True)
        leg.release_connection(connection)
        leg._advance(LEG_DONE)
        leg.allocation.release()

    # ---- the prefill leg -----------------------------------------------------------------------------------

    async def run_prefill(
        self, leg: Leg, kv_transfer_params: dict[str, Any] | None, **extra: Any
    ) -> PrefillResult:
        body = prefill_body(self.dispatch.request.body, kv_transfer_params, **extra)
        connection = await leg.send(body, leg.deadline, whole=True)
        raw = connection.whole_body()
        answered_after = time.perf_counter() - leg.sent_at
        leg.release_connection(connection)
        leg.allocation.release_tokens()
        try:
            response = jsonio.loads(raw)
        except ValueError:
            raise leg.failed("invalid_json", f"{describe(leg.target)} answered invalid JSON") from None
        if not isinstance(response, dict):
            raise leg.failed("invalid_json", f"{describe(leg.target)} answered a non-object")
        leg._advance(LEG_DONE)
        if self.phase is PREFILL:
            self._enter(HANDOVER)
        params = response.get("kv_transfer_params")
        usage = response.get("usage") if isinstance(response.get("usage"), dict) else {}
        details = (
            usage.get("prompt_tokens_details") if isinstance(usage.get("prompt_tokens_details"), dict) else {}
        )
        cached = details.get("cached_tokens") if isinstance(details.get("cached_tokens"), int) else 0
        self.cached_tokens = cached
        prediction = self.dispatch.request.demand.kv_prediction
        if prediction is not None and "cached_tokens" in details:
            self.observer.kv_predicted(leg, prediction, cached)
        # the rate is per token computed: tokens found in a cache were not
        self.context.scheduler.prefill_answered(
            leg.allocation.endpoint, leg.work - min(cached, leg.work), answered_after
        )
        return PrefillResult(raw, params if isinstance(params, dict) else None, cached)

    def prefill_in_background(self, leg: Leg, kv_transfer_params: dict[str, Any], **extra: Any) -> None:
        """Run the prefill leg as its own task (concurrent: both legs at once)."""
        leg.task = asyncio.ensure_future(self.run_prefill(leg, kv_transfer_params, **extra))
        leg.task.add_done_callback(_consume_outcome)

    def prefill_failed(self, failure: LegFailure) -> None:
        """A prefill leg the attempt does not await failed (decode_first's callback): its failure is the
        attempt's cause, and the other legs are closed at once so the attempt ends now."""
        self._note_cause(failure)
        for leg in self.legs:
            if not leg.ended:
                leg.abort(f"{failure.role} leg failed")

    async def prefill_cached_tokens(self) -> int | None:
        """The prefill's cached-token count, waiting (within the prefill's own deadline) if it still runs."""
        task = self.prefill.task if self.prefill is not None else None
        if self.cached_tokens is None and task is not None:
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                if task.cancelled():
                    return None
                raise
            except Exception:
                return None
        return self.cached_tokens

    # ---- the client-facing leg -----------------------------------------------------------------------------

    async def open_client_leg(self, leg: Leg, body: bytes) -> None:
        """Send the leg whose output the client sees; return once its first output (or whole body) arrived."""
        dispatch = self.dispatch
        target = leg.target
        if not dispatch.request.stream:
            connection = await leg.send(body, leg.deadline, whole=True)
            leg.first = connection.whole_body()
            self._output(leg)
            return
        await leg.send(body, leg.deadline)
        splitter = leg.splitter = SseSplitter()
        read_timeout = self.context.limits.timeouts.read_timeout
        # Events before the first output (the chat role chunk) are held back: until output exists nothing
        # reaches the client, so a failure stays retryable and the next attempt's events are the only ones.
        held = b""
        silence = 0.0
        while True:
            chunk = await leg.read_chunk(leg.deadline, silence)
            if chunk is None:
                raise leg.failed("empty_stream", f"{describe(target)} ended its stream without any output")
            events = splitter.feed(chunk)
            if not events:
                continue
            for event in events.split(EVENT_END):
                if event.startswith(ERROR_EVENT_PREFIX):
                    raise leg.failed(
                        "error_event",
                        f"{describe(target)} streamed an error first: {engine_message(event[6:])}",
                    )
                if event and carries_output(event):
                    leg.first = held + events
                    self._output(leg)
                    return
            held += events
            silence = read_timeout

    def _output(self, leg: Leg) -> None:
        leg._advance(RECEIVING)
        if self.prefill is not None:
            # The decode side has the KV now (it produced output): the prefill side no longer holds it for us.
            self.prefill.allocation.release_kv()
        self._enter(STREAMING)
        self.output_at = self.since

    # ---- ends ----------------------------------------------------------------------------------------------

    def finish(self) -> None:
        """The client-facing leg ended as the engine ended it: its connection goes back to the pool if the
        exchange completed."""
        leg = self.client
        assert leg is not None and leg.connection is not None
        if leg.connection.complete:
            leg.release_connection(leg.connection)
        leg._move(LEG_DONE)
        self._enter(DONE)

    def stream_failed(self, failure: LegFailure) -> None:
        """The client-facing leg failed after its output reached the client (the relay ends the stream)."""
        leg = self.client
        assert leg is not None
        if leg.connection is not None and leg.connection.complete:
            leg.release_connection(leg.connection)
        leg._record(failure)
        self.failure = failure
        self._enter(FAILED)

    def fail(self, failure: LegFailure, policy: Backoff) -> float | None:
        """Settle a failure before the response started: close every leg, then RETRYING (the delay before the
        next attempt is returned) or FAILED (`self.failure` is what the client is told)."""
        dispatch = self.dispatch
        failure = self.cause or failure
        if self.phase is ABORTED:  # ended from outside meanwhile: nothing left to settle
            self.failure = failure
            return None
        self.abandon(
            "engine rejected the request"
            if isinstance(failure, EngineRejected)
            else f"{failure.role} leg failed"
        )
        if failure.rule.exclude_instance and failure.target is not None:
            dispatch.exclude(failure.role, failure.target.instance_id, failure.rule.instance_gone)
        self.failure, delay = settle(
            failure,
            self.number,
            policy,
            dispatch.loop.time(),
            dispatch.deadline,
            self.context.limits.exceptions.infer_timeout,
            may_retry=RETRYING in PHASE_NEXT[self.phase],  # the guard: never once output exists
        )
        self._enter(FAILED if delay is None else RETRYING)
        return delay

    def abort(self, reason: str) -> None:
        """Ended from outside (client gone, not reading, infer_timeout, shutdown)."""
        self.abandon(reason)
        if self.phase not in (DONE, FAILED, RETRYING, ABORTED):
            self._enter(ABORTED)

    def abandon(self, reason: str) -> None:
        """Close every leg still open and release every allocation (end of the attempt or of the request)."""
        for leg in self.legs:
            leg.abort(reason)
            leg.allocation.release()

    def forget_legs(self) -> None:
        """The request is over: drop the attempt's references to its legs (each refers back to the attempt),
        so that the request's objects are freed by reference counting rather than left to the cyclic GC."""
        self.legs = []
        self.client = self.prefill = None


def _wake(room: "asyncio.Future[None]") -> None:
    if not room.done():
        room.set_result(None)


def _consume_outcome(task: "asyncio.Task[PrefillResult]") -> None:
    if not task.cancelled():
        task.exception()
