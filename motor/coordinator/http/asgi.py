"""Small raw-ASGI helpers shared by the coordinator's apps (no framework on the hot path)."""

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from motor.coordinator.http.errors import HttpError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

JSON = b"application/json"
# The coordinator's server (protocol.py) adds two callables to every scope: ON_DISCONNECT(callback) has
# callback() called when the client goes away before the response ended; COMPLETE_BODY() hands over the whole
# request body when it has all arrived and none was received yet, else None (then use receive()).
ON_DISCONNECT = "motor.on_disconnect"
COMPLETE_BODY = "motor.complete_body"


def header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return value
    return None


CLOSE = (b"connection", b"close")


async def read_body(scope: Scope, receive: Receive, limit: int, timeout: float | None = None) -> bytes:
    """The request body; 413 as soon as it is known to exceed `limit` bytes, 408 (and the connection closed)
    when it has not all arrived within `timeout` seconds."""
    body = scope[COMPLETE_BODY]()
    if body is not None:
        if len(body) > limit:
            raise _too_large(limit)
        return body
    if timeout is None:
        return await _read_body(scope, receive, limit)
    try:
        async with asyncio.timeout(timeout):
            return await _read_body(scope, receive, limit)
    except TimeoutError:
        raise HttpError(
            408,
            f"the request body did not arrive within {timeout:g} s "
            "(motor_coordinator_config.request_limit.body_read_timeout)",
            type_="invalid_request_error",
            code="request_timeout",
            headers=[CLOSE],
        ) from None


async def _read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    declared = header(scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    message = await receive()
    body = message.get("body", b"")
    if not message.get("more_body", False):
        return body
    parts = [body]
    size = len(body)
    while message.get("more_body", False):
        message = await receive()
        if message["type"] == "http.disconnect":
            raise HttpError(
                400, "the client closed the connection while sending the body", type_="invalid_request_error"
            )
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        parts.append(chunk)
    return b"".join(parts)


def _too_large(limit: int) -> HttpError:
    return HttpError(
        413,
        f"the request body exceeds {limit} bytes (motor_coordinator_config.request_limit.max_body_bytes)",
        type_="invalid_request_error",
        code="request_too_large",
    )


async def send_bytes(
    send: Send,
    status: int,
    body: bytes,
    *,
    content_type: bytes = JSON,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    response_headers = [(b"content-type", content_type), (b"content-length", b"%d" % len(body))]
    if headers:
        response_headers.extend(headers)
    await send({"type": "http.response.start", "status": status, "headers": response_headers})
    await send({"type": "http.response.body", "body": body})


async def send_json(
    send: Send, status: int, payload: Any, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    await send_bytes(send, status, json.dumps(payload).encode(), headers=headers)


async def send_error(send: Send, error: HttpError, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    await send_bytes(send, error.status, error.body(), headers=[*error.headers, *(headers or [])])


def not_found(path: str) -> HttpError:
    return HttpError(404, f"no route for {path}", type_="invalid_request_error", code="not_found")


def method_not_allowed(method: str, path: str) -> HttpError:
    return HttpError(
        405, f"{method} is not allowed on {path}", type_="invalid_request_error", code="method_not_allowed"
    )
