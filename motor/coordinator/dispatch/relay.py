"""Sending the client-facing leg to the client: one normal OpenAI response or stream.

Streams are relayed event by event as the engine produces them. The attempt is STREAMING by then, so a failure
can no longer be retried; the stream ends with an explicit error event (the failure table's `stream_code`)
and `data: [DONE]` — unless the request is armed for replay (`replay.py`, `relay_replaying`).
"""

import time

from motor.coordinator.dispatch.attempt import Attempt
from motor.coordinator.dispatch.failures import LegFailure, describe
from motor.coordinator.dispatch.replay import RECOMPUTED, Replayer, StreamLedger
from motor.coordinator.http import jsonio
from motor.coordinator.http.asgi import JSON, Send
from motor.coordinator.http.sse import USAGE_MARK, error_events, rewrite_usage_events, set_cached_tokens
from motor.coordinator.http.upstream import UpstreamError
from motor.coordinator.metrics import CoordinatorMetrics

STREAM_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


async def relay_full(attempt: Attempt, send: Send) -> int:
    d = attempt.dispatch
    leg = attempt.client
    assert leg is not None
    body = leg.first
    if attempt.pd:
        body = _merge_usage(body, await attempt.prefill_cached_tokens())
    attempt.finish()
    headers = [(b"content-type", JSON), (b"content-length", b"%d" % len(body)), (b"x-request-id", d.rid)]
    d.sending(time.perf_counter())
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
    d.sent()
    return 200


async def relay_stream(attempt: Attempt, send: Send, metrics: CoordinatorMetrics) -> int:
    d = attempt.dispatch
    leg = attempt.client
    assert leg is not None and leg.splitter is not None and leg.connection is not None
    headers = [*STREAM_HEADERS, (b"x-request-id", d.rid)]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    first = await _events(attempt, leg.first)
    d.sending(time.perf_counter())
    await send({"type": "http.response.body", "body": first, "more_body": True})
    d.sent()
    last = time.perf_counter()
    metrics.ttft_batch.observe(last - d.arrival)
    splitter, connection, target = leg.splitter, leg.connection, leg.target
    itl = metrics.itl_batch
    read_timeout = attempt.context.limits.timeouts.read_timeout
    deadline = d.deadline
    rewrite_usage = attempt.pd
    sending, sent = d.sending, d.sent
    tail = b""
    waited = 0.0
    # The per-event path: kept flat (no helper coroutines) because it runs once per token of every stream.
    try:
        while True:
            started = time.perf_counter()
            try:
                chunk = await connection.next_chunk(deadline, read_timeout)
            except UpstreamError as exc:
                tail = _stream_failure(attempt, leg.upstream_failed(exc))
                break
            now = time.perf_counter()
            waited += now - started
            if chunk is None:
                if not splitter.done:
                    tail = _stream_failure(
                        attempt,
                        leg.failed(
                            "incomplete_stream",
                            f"{target.role} instance {target.instance_id} ended the stream without [DONE]",
                        ),
                    )
                break
            events = splitter.feed(chunk)
            if not events:
                continue
            if rewrite_usage and USAGE_MARK in events:
                events = await _events(attempt, events)
            sending(now)
            await send({"type": "http.response.body", "body": events, "more_body": True})
            sent()
            count = events.count(b"data: {")
            if count:
                itl.observe((now - last) / count, count)
                last = now
    finally:
        d.add_wait(waited)
    if not tail:
        attempt.finish()
    await send({"type": "http.response.body", "body": tail, "more_body": False})
    return 200


def _stream_failure(attempt: Attempt, failure: LegFailure) -> bytes:
    """End the attempt with `failure` and the SSE error events that tell the client."""
    attempt.stream_failed(failure)
    if failure.kind == "incomplete_stream":
        return error_events(failure.message, failure.error_type, failure.rule.stream_code)
    d = attempt.dispatch
    if d.loop.time() >= d.deadline:
        infer_timeout = attempt.context.limits.exceptions.infer_timeout
        message = f"the request exceeded infer_timeout ({infer_timeout:g} s)"
        return error_events(message, "timeout", "infer_timeout")
    return error_events(
        f"the stream broke after it started: {failure.message}", failure.error_type, failure.rule.stream_code
    )


async def _events(attempt: Attempt, events: bytes) -> bytes:
    if attempt.pd and USAGE_MARK in events:
        cached = await attempt.prefill_cached_tokens()
        if cached is not None:
            return rewrite_usage_events(events, cached)
    return events


def _merge_usage(body: bytes, cached_tokens: int | None) -> bytes:
    try:
        response = jsonio.loads(body)
    except ValueError:
        return body
    if not isinstance(response, dict):
        return body
    response.pop("kv_transfer_params", None)
    if cached_tokens is not None:
        set_cached_tokens(response, cached_tokens)
    return jsonio.dumps(response)


async def relay_replaying(
    attempt: Attempt, send: Send, metrics: CoordinatorMetrics, ledger: StreamLedger, replayer: Replayer
) -> int:
    """`relay_stream` for an armed request (`replay.py`): every event goes through the ledger, and a failure
    after output replays the request and splices the continuation into the same client stream."""
    d = attempt.dispatch
    headers = [*STREAM_HEADERS, (b"x-request-id", d.rid)]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    read_timeout = attempt.context.limits.timeouts.read_timeout
    last = 0.0
    while True:
        leg = attempt.client
        assert leg is not None and leg.splitter is not None and leg.connection is not None
        splitter, connection, target = leg.splitter, leg.connection, leg.target
        pending = leg.first
        failure: LegFailure | None = None
        while failure is None:
            if pending:
                if attempt.pd and ledger.replays == 0 and USAGE_MARK in pending:
                    ledger.cached_tokens = await attempt.prefill_cached_tokens()
                events, signal = ledger.process(pending)
                if events:
                    now = time.perf_counter()
                    if not last:
                        metrics.ttft_batch.observe(now - d.arrival)
                    elif ledger.last_output_at == 0.0:
                        metrics.resume_gap.observe(now - last)
                    count = events.count(b"data: {")
                    if count:
                        if last and ledger.last_output_at:
                            metrics.itl_batch.observe((now - last) / count, count)
                        last = ledger.last_output_at = now
                    d.sending(now)
                    await send({"type": "http.response.body", "body": events, "more_body": True})
                    d.sent()
                if signal is not None:
                    kind = "recomputed" if signal == RECOMPUTED else "error_event"
                    message = f"{target.role} instance {target.instance_id} ended the stream as recomputed"
                    failure = leg.failed(
                        kind, message if kind == "recomputed" else f"{describe(target)}: {signal}"
                    )
                    break
            started = time.perf_counter()
            try:
                chunk = await connection.next_chunk(d.deadline, read_timeout)
            except UpstreamError as exc:
                failure = leg.upstream_failed(exc)
                break
            finally:
                d.add_wait(time.perf_counter() - started)
            if chunk is None:
                if splitter.done:
                    attempt.finish()
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                    return 200
                failure = leg.failed(
                    "incomplete_stream", f"{describe(target)} ended the stream without [DONE]"
                )
                break
            pending = splitter.feed(chunk)
        attempt.stream_failed(failure)
        ledger.last_output_at = 0.0  # the next output closes the resume gap
        outcome = await replayer.replay(d, ledger, failure)
        if isinstance(outcome, bytes):
            await send({"type": "http.response.body", "body": outcome, "more_body": False})
            return 200
        attempt = outcome
