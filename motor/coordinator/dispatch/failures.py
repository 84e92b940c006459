"""Why a leg or a request failed, and what follows from it — one table for every failure the dispatch sees.

`FAILURES` rows are keyed by kind: whether another attempt may succeed (`retryable`; only ever used before the
first output reached the client), whether the next attempts avoid the instance that failed
(`exclude_instance`), the HTTP status and error type when the request ends with it before the response
started, the SSE error code when it happens after (then the relay ends the stream with an error event), and
whether it counts against the instance's circuit breaker (`breaks_circuit`: the instance's own fault, not the
coordinator closing a leg, nor a slow prefill, which its stall count handles), and whether the instance looks
gone (`instance_gone`: once every instance failed the request, a gone one is tried last; `failed_instances.py`).
`ABORTS` are the ends imposed from outside the legs (client gone, client not reading, infer_timeout, shutdown).

What a failure before the response started leads to is `settle`: the row, the retry guard, `max_retry`,
backoff `retry_delay * 2**attempt`, never past the request's infer_timeout. `open_with_retries` runs attempts
until the client-facing leg produced output: it only waits and starts the next one. Each attempt chooses its
flow from the instance set of that moment, so an attempt after a decode instance went away runs aggregated on
prefill instances, and one that found no instance for a role waits for the controller to register one.
"""

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from motor.coordinator.client_request import ClientRequest
from motor.runtime.backoff import Backoff

if TYPE_CHECKING:
    # import cycle: type hints only — settle() and the retry loop decide for these objects
    from motor.coordinator.dispatch.attempt import Attempt

    # import cycle: type hints only (as above)
    from motor.coordinator.dispatch.dispatch import Dispatch

    # import cycle: type hints only (as above)
    from motor.coordinator.dispatch.flows import Flow
    from motor.coordinator.registry import Target

log = logging.getLogger(__name__)

ENGINE_MESSAGE_LIMIT = 500
UPSTREAM_ERROR = "upstream_error"


@dataclass(frozen=True, slots=True)
class FailureRule:
    retryable: bool
    exclude_instance: bool
    status: int
    error_type: str
    stream_code: str
    breaks_circuit: bool = False
    instance_gone: bool = False


_LEG = FailureRule(True, True, 502, UPSTREAM_ERROR, "upstream_failed", breaks_circuit=True)
# the connection was refused or dropped: the engine is likely dead
_GONE = FailureRule(
    True, True, 502, UPSTREAM_ERROR, "upstream_failed", breaks_circuit=True, instance_gone=True
)

FAILURES: dict[str, FailureRule] = {
    # below HTTP: the kinds of motor.coordinator.http.upstream.UpstreamError
    "connect": _GONE,
    "timeout": FailureRule(True, True, 504, UPSTREAM_ERROR, "read_timeout", breaks_circuit=True),
    "closed": _GONE,
    "protocol": _LEG,
    "cancelled": FailureRule(True, True, 502, UPSTREAM_ERROR, "upstream_failed"),
    # the engine's answer: 5xx, 408 or 429 (reason http_<status>); a body that is not an OpenAI response; a
    # stream that ended, or sent an error event, before any output
    "http_status": _LEG,
    "invalid_json": _LEG,
    "empty_stream": _LEG,
    "error_event": _LEG,
    # a prefill leg missed its own deadline (prompt size / the instance's measured prefill rate): the leg is
    # closed and moves to another prefill instance; the instance counts a stall (repeated ones degrade it)
    "prefill_stalled": FailureRule(True, True, 504, UPSTREAM_ERROR, "prefill_stalled"),
    # the engine ended a stream with stop_reason "recomputed" (it dropped the request's KV): replayed elsewhere
    # when reschedule_config is on (the instance is not at fault), else the stream ends with this code
    "recomputed": FailureRule(True, False, 502, UPSTREAM_ERROR, "recomputed"),
    # a stream that ended without [DONE]: only ever after output, so only its stream code matters
    "incomplete_stream": FailureRule(False, False, 502, UPSTREAM_ERROR, "incomplete_stream"),
    # any other 4xx: the request itself is refused, another instance would refuse it too; answered as is
    "engine_rejected": FailureRule(False, False, 400, UPSTREAM_ERROR, "upstream_failed"),
    # no instance for a role (none, only decode ones, or it went away): wait for the controller with backoff
    "no_instance": FailureRule(True, False, 503, "service_unavailable", "upstream_failed"),
    # every instance of a role stayed at its admission bound (pd_aware) for admission_queue_timeout: shed
    "overloaded": FailureRule(False, False, 503, "service_unavailable", "overloaded"),
    # the request's own budget ran out between attempts
    "infer_timeout": FailureRule(False, False, 504, UPSTREAM_ERROR, "infer_timeout"),
}


@dataclass(frozen=True, slots=True)
class AbortRule:
    label: str  # the log line's and the cancelled-legs metric's reason
    status: int  # recorded for the request (the client may never see it)


ABORTS: dict[str, AbortRule] = {
    "client_gone": AbortRule("client disconnected", 499),
    "write_timeout": AbortRule("write_timeout", 408),
    "infer_timeout": AbortRule("infer_timeout", 504),
    "shutdown": AbortRule("coordinator shutting down", 499),
}


class LegFailure(Exception):
    """A leg (or the choice of an instance for it) failed; what that means is the `FAILURES` row of `kind`.

    `reason` is the metric label and error code: the kind, or a finer name (`http_503`, `no_prefill_instance`).
    """

    def __init__(
        self,
        kind: str,
        role: str,
        target: "Target | None",
        message: str,
        *,
        reason: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        rule = FAILURES[kind]
        self.kind = kind
        self.rule = rule
        self.role = role
        self.target = target
        self.message = message
        self.reason = reason or kind
        self.status = status or rule.status

    @property
    def retryable(self) -> bool:
        return self.rule.retryable

    @property
    def error_type(self) -> str:
        return self.rule.error_type

    def gave_up(self, attempts: int) -> None:
        self.message = f"{self.message} (gave up after {attempts} attempts)"


class EngineRejected(LegFailure):
    """The engine refused the request itself (a 4xx other than 408/429): its answer goes to the client as is."""

    def __init__(self, role: str, target: "Target", status: int, body: bytes, content_type: bytes) -> None:
        super().__init__(
            "engine_rejected",
            role,
            target,
            f"engine answered {status}",
            reason=f"http_{status}",
            status=status,
        )
        self.body = body
        self.content_type = content_type


def no_instance(role: str, message: str, reason: str = "no_instance") -> LegFailure:
    return LegFailure("no_instance", role, None, message, reason=reason)


def overloaded(role: str, message: str) -> LegFailure:
    return LegFailure("overloaded", role, None, message)


def retryable_status(status: int) -> bool:
    return status >= 500 or status in (408, 429)


def describe(target: "Target") -> str:
    return f"{target.role} instance {target.instance_id} ({target.host}:{target.port})"


def engine_message(raw: bytes) -> str:
    """The error message of an engine's answer (OpenAI error body, a plain message, or the raw start)."""
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


def settle(
    failure: LegFailure,
    attempt: int,
    policy: Backoff,
    now: float,
    deadline: float,
    infer_timeout: float,
    *,
    may_retry: bool,
) -> tuple[LegFailure, float | None]:
    """What `failure` of attempt number `attempt` (0 first) leads to when no output reached the client yet:
    `(failure, delay)` to retry after `delay` seconds, or `(final, None)`: the failure the request ends with.

    `may_retry` is the state machine's guard (never once output exists). A request past its `deadline` ends
    with `infer_timeout`; one whose next backoff would end past it, or whose retries are used up, ends with the
    failure, marked as given up after its attempts."""
    if not failure.rule.retryable:
        return failure, None
    if now >= deadline:
        timeout = LegFailure(
            "infer_timeout",
            failure.role,
            failure.target,
            f"the request did not complete within infer_timeout ({infer_timeout:g} s); "
            f"last error: {failure.message}",
        )
        return timeout, None
    delay = policy.next_delay(attempt + 1)
    if not may_retry or delay is None or now + delay >= deadline:
        if attempt:
            failure.gave_up(attempt + 1)
        return failure, None
    return failure, delay


async def open_with_retries(d: "Dispatch", choose_flow: Callable[[ClientRequest], "Flow"]) -> "Attempt":
    """The attempt whose client-facing leg has its first output (STREAMING); raises the final LegFailure.

    `choose_flow` is called per attempt with the request (a LegFailure of its own when no flow can run yet).
    Every attempt runs the legs its flow names, the encode leg included: a retry after a prefill failure
    encodes again, so the prefill instance it lands on finds the encoder output wherever it looks for it."""
    policy = d.context.limits.retry_policy
    while True:
        attempt = d.new_attempt()
        try:
            await attempt.run(choose_flow(d.request))
            return attempt
        except LegFailure as failure:
            delay = attempt.fail(failure, policy)
            settled = attempt.failure
            assert settled is not None
            if delay is None:
                raise settled from None
            log.warning("request %s: %s; retrying in %.3g s", d.label, settled.message, delay)
            if delay:
                await d.backoff(delay)
