"""Sending the client-facing leg to the client: one normal OpenAI response or stream.

Streams are relayed event by event as the engine produces them. After the first byte reached the client a
failure can no longer be retried; the stream then ends with an explicit error event and `data: [DONE]`.
"""

import json
import time

from motor.coordinator.asgi import JSON, Send
from motor.coordinator.dispatch.profiles import prefill_cached_tokens
from motor.coordinator.dispatch.request import Dispatch, LegFailure, Opened
from motor.coordinator.sse import USAGE_MARK, error_events, rewrite_usage_events, set_cached_tokens
from motor.coordinator.upstream import UpstreamError

STREAM_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


async def _send(d: Dispatch, send: Send, message: dict) -> None:
    d.sending_since = time.perf_counter()
    await send(message)
    d.sending_since = 0.0


async def relay_full(d: Dispatch, opened: Opened, send: Send) -> int:
    body = opened.first
    if d.pd:
        body = _merge_usage(body, await prefill_cached_tokens(d))
    d.finish_leg(opened.connection)
    d.finished = True
    headers = [(b"content-type", JSON), (b"content-length", b"%d" % len(body)), (b"x-request-id", d.rid)]
    await _send(d, send, {"type": "http.response.start", "status": 200, "headers": headers})
    await _send(d, send, {"type": "http.response.body", "body": body})
    _observe_leg_end(d, opened)
    return 200


async def relay_stream(d: Dispatch, opened: Opened, send: Send) -> int:
    metrics = d.core.metrics
    headers = [*STREAM_HEADERS, (b"x-request-id", d.rid)]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await _send(
        d, send, {"type": "http.response.body", "body": await _events(d, opened.first), "more_body": True}
    )
    last = time.perf_counter()
    metrics.ttft_batch.observe(last - d.arrival)
    splitter = opened.splitter
    assert splitter is not None
    connection, target = opened.connection, opened.target
    itl = metrics.itl_batch
    read_timeout = d.core.config.timeout_config.read_timeout
    deadline = d.deadline
    rewrite_usage = d.pd
    tail = b""
    # The per-event path: kept flat (no helper coroutines) because it runs once per token of every stream.
    while True:
        started = time.perf_counter()
        try:
            chunk = await connection.next_chunk(deadline, read_timeout)
        except UpstreamError as exc:
            tail = _stream_failure(d, d.failure(target, exc))
            break
        now = time.perf_counter()
        d.waited += now - started
        if chunk is None:
            if not splitter.done:
                tail = error_events(
                    f"{target.role} instance {target.instance_id} ended the stream without [DONE]",
                    "upstream_error",
                    "incomplete_stream",
                )
            break
        events = splitter.feed(chunk)
        if not events:
            continue
        if rewrite_usage and USAGE_MARK in events:
            events = await _events(d, events)
        d.sending_since = now
        await send({"type": "http.response.body", "body": events, "more_body": True})
        d.sending_since = 0.0
        count = events.count(b"data: {")
        if count:
            itl.observe((now - last) / count, count)
            last = now
    if connection.complete:
        d.finish_leg(connection)
    d.finished = True
    await send({"type": "http.response.body", "body": tail, "more_body": False})
    _observe_leg_end(d, opened)
    return 200


def _stream_failure(d: Dispatch, failure: LegFailure) -> bytes:
    if d.loop.time() >= d.deadline:
        message = f"the request exceeded infer_timeout ({d.core.config.exception_config.infer_timeout:g} s)"
        return error_events(message, "timeout", "infer_timeout")
    code = "read_timeout" if failure.reason == "timeout" else "upstream_failed"
    return error_events(f"the stream broke after it started: {failure.message}", "upstream_error", code)


async def _events(d: Dispatch, events: bytes) -> bytes:
    if d.pd and USAGE_MARK in events:
        cached = await prefill_cached_tokens(d)
        if cached is not None:
            return rewrite_usage_events(events, cached)
    return events


def _merge_usage(body: bytes, cached_tokens: int | None) -> bytes:
    try:
        response = json.loads(body)
    except ValueError:
        return body
    if not isinstance(response, dict):
        return body
    response.pop("kv_transfer_params", None)
    if cached_tokens is not None:
        set_cached_tokens(response, cached_tokens)
    return json.dumps(response).encode()


def _observe_leg_end(d: Dispatch, opened: Opened) -> None:
    now = time.perf_counter()
    if d.pd:
        d.core.metrics.observe_leg("decode", now - opened.opened_at)
    else:
        d.core.metrics.observe_leg("aggregated", now - d.leg_started)
