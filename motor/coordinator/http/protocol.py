"""One client connection of the coordinator's HTTP/1.1 server: httptools parses, the ASGI app answers.

Only the part of ASGI the coordinator's apps use: an `http` scope (method, path, query_string, headers, client,
server, scheme, http_version), `receive` → `http.request` / `http.disconnect`, and `send` ←
`http.response.start` / `http.response.body` (with `more_body`), plus two extensions: `scope[ON_DISCONNECT]`
(`callback`) has `callback()` called when the client goes away before the response ended — what a task
waiting on `receive()` for `http.disconnect` would tell, without a task per request — and
`scope[COMPLETE_BODY]()` hands over the whole body when it has all arrived and none was received yet (else
None: use `receive()`), so the common request costs no wait and no read deadline. The head is held back until
the first body message so that a complete response leaves in one write; a response without content-length is
sent chunked.

Requests on one connection are answered in order, by one task per connection (started by its first request):
a request that arrives while another is answered waits (and the connection stops reading until it is its
turn). Request bodies are buffered up to `BODY_PAUSE_BYTES` before reading pauses until the app takes them;
responses wait for the transport to drain when the client reads slower than they are sent. A client that goes
away turns a pending or later `receive()` into `http.disconnect`. Deadlines (idle keep-alive, the request head)
are enforced by the server's sweeper (`motor.coordinator.http.server`) from `idle_since` and `head_since`; the
head's clock starts with its first byte, stray CRLFs before a request line included. A head beyond the server's
`max_head_bytes` is answered 431.

A response that completes before its request body was read whole closes the connection (the client may never
send the rest: RFC 9110 §10.1.1); so do the server's own refusals (400, 408, 431). Such a connection stops
writing and keeps reading, dropping what arrives, for up to LINGER_SECONDS before it closes, so that the
client's kernel does not discard the answer on a reset. Response heads are checked before they are written
(header names are tokens, values hold no CR, LF or NUL; the server owns the framing) and a body never goes
beyond, nor stops short of, its content-length.
"""

import asyncio
import logging
import re
import urllib.parse
from collections import deque
from collections.abc import Callable
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

import httptools

from motor.coordinator.http.asgi import COMPLETE_BODY, ON_DISCONNECT, Message, send_error
from motor.coordinator.http.errors import HttpError, bad_request

if TYPE_CHECKING:
    # import cycle: type hints only — the server whose limits a connection reads
    from motor.coordinator.http.server import HttpServer

log = logging.getLogger(__name__)

BODY_PAUSE_BYTES = 1 << 16
LINGER_SECONDS = 2.0
# The bytes one header line adds beyond its name and value: ": " and CRLF.
HEADER_LINE_OVERHEAD = 4
STATUS_LINES = {
    status: b"HTTP/1.1 %d %s\r\n" % (status, HTTPStatus(status).phrase.encode())
    for status in range(100, 600)
    if status in HTTPStatus._value2member_map_
}
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
DISCONNECT: Message = {"type": "http.disconnect"}
INTERNAL_ERROR = HttpError(500, "the coordinator failed to answer this request", type_="internal_error")
MALFORMED = bad_request("malformed HTTP request", code="bad_http_request")
HEADER_NAME = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
HEADER_VALUE_FORBIDDEN = re.compile(rb"[\r\n\0]")
# The names the coordinator's apps send, tokens as HEADER_NAME spells them (a unit test checks): not matched
# again.
KNOWN_HEADER_NAMES = frozenset(
    (
        b"cache-control",
        b"connection",
        b"content-length",
        b"content-type",
        b"retry-after",
        b"www-authenticate",
        b"x-ratelimit-limit",
        b"x-ratelimit-remaining",
        b"x-request-id",
    )
)
# The headers that frame the response: the app's content-length and connection are read, transfer-encoding is
# the server's alone (an app that set it would corrupt the framing).
FRAMING_HEADERS = frozenset((b"content-length", b"connection", b"transfer-encoding"))


class ResponseError(Exception):
    """The app's response cannot be sent as it is: a bad header, or a body that does not match its length."""


def head_too_large(limit: int) -> HttpError:
    return HttpError(
        431,
        f"the request head exceeds {limit} bytes (motor_coordinator_config.request_limit.max_head_bytes)",
        type_="invalid_request_error",
        code="request_header_fields_too_large",
    )


def status_line(status: int) -> bytes:
    return STATUS_LINES.get(status) or b"HTTP/1.1 %d \r\n" % status


class Exchange:
    """One request and its response: the ASGI `receive` and `send` of one app call."""

    __slots__ = (
        "body",
        "body_size",
        "body_taken",
        "bodyless",
        "chunked",
        "connection",
        "disconnected",
        "expect_continue",
        "head",
        "keep_alive",
        "more_body",
        "on_gone",
        "response_complete",
        "scope",
        "started",
        "unsent",
        "waiter",
    )

    def __init__(self, connection: "HttpConnection", scope: dict[str, Any], keep_alive: bool) -> None:
        self.connection = connection
        self.scope = scope
        self.keep_alive = keep_alive
        self.expect_continue = False
        self.body: list[bytes] = []
        self.body_size = 0
        self.more_body = True
        self.body_taken = False
        self.waiter: asyncio.Future[None] | None = None
        self.disconnected = False
        self.on_gone: Callable[[], None] | None = None
        # The response head, built at http.response.start and written with the first body bytes.
        self.started = False
        self.head: bytes | None = None
        self.chunked = False
        self.bodyless = False
        self.unsent = -1  # bytes of the declared content-length not written yet; -1: no length declared
        self.response_complete = False

    def complete_body(self) -> bytes | None:
        if self.more_body or self.body_taken or self.disconnected:
            return None
        return self._take_body()

    def _take_body(self) -> bytes:
        """The body buffered so far, handed over; reading resumes if it had paused for it."""
        body = self.body[0] if len(self.body) == 1 else b"".join(self.body)
        self.body = []
        self.body_size = 0
        self.body_taken = not self.more_body
        if self.connection.reading_paused:
            self.connection.resume_reading()
        return body

    def on_disconnect(self, callback: Callable[[], None]) -> None:
        """Have `callback()` called when the client goes away before the response ended."""
        self.on_gone = callback
        if self.disconnected:
            self.connection.loop.call_soon(callback)

    def gone(self) -> None:
        self.disconnected = True
        self.wake()
        if self.on_gone is not None:
            self.on_gone()

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def receive(self) -> Message:
        connection = self.connection
        if self.expect_continue:
            self.expect_continue = False
            if not self.started and not connection.closing:
                connection.transport.write(CONTINUE)
        while True:
            if self.disconnected or self.response_complete:
                return DISCONNECT
            if not self.body_taken and (self.body or not self.more_body):
                return {"type": "http.request", "body": self._take_body(), "more_body": self.more_body}
            connection.resume_reading()
            self.waiter = waiter = connection.loop.create_future()
            try:
                await waiter
            finally:
                self.waiter = None

    async def send(self, message: Message) -> None:
        connection = self.connection
        if connection.write_paused and not self.disconnected:
            await connection.drain()
        if connection.closing:
            self.disconnected = True
        if self.disconnected or self.response_complete:
            return
        if message["type"] == "http.response.start":
            self._start(message)
            return
        body = message.get("body", b"")
        more_body = message.get("more_body", False)
        if self.bodyless:
            body = b""
        elif self.chunked:
            if body:
                body = b"%x\r\n%b\r\n" % (len(body), body)
            if not more_body:
                body += b"0\r\n\r\n"
        elif self.unsent >= 0:
            self.unsent -= len(body)
            if self.unsent < 0:
                raise ResponseError("the response body exceeds its content-length")
            if not more_body and self.unsent:
                log.error(
                    "the response to %s ended %d bytes short of its content-length",
                    self.scope["path"],
                    self.unsent,
                )
                self.keep_alive = False
        head = self.head
        if head is not None:
            self.head = None
            body = head + body if body else head
        if body:
            connection.transport.write(body)
        if not more_body:
            self.response_complete = True
            self.body = []  # a body the app did not read: the rest of it is dropped as it arrives
            self.body_size = 0
            if self.waiter is not None:
                self.wake()
            connection.response_done(self)

    def _start(self, message: Message) -> None:
        status = message["status"]
        parts = [status_line(status)]
        length = -1
        connection = False
        headers = message.get("headers", ())
        for name, value in headers:
            if name not in KNOWN_HEADER_NAMES and not HEADER_NAME.fullmatch(name):
                raise ResponseError(f"invalid response header {name[:64]!r}")
            if name in FRAMING_HEADERS:
                if name == b"content-length":
                    if length >= 0 or not value.isdigit():
                        raise ResponseError(f"invalid or repeated content-length {value[:64]!r}")
                    length = int(value)
                elif name == b"connection":
                    connection = True
                    if b"close" in value.lower():
                        self.keep_alive = False
                else:
                    raise ResponseError(f"the server sets {name.decode()}, not the app")
            parts.append(b"%b: %b\r\n" % (name, value))
        head = b"".join(parts)
        # Every line ends with the one CRLF it brings, and neither the status line nor a name holds CR, LF or
        # NUL: any other one is in a value. One scan of the head instead of one per value.
        lines = len(parts)
        if head.count(b"\n") != lines or head.count(b"\r") != lines or b"\0" in head:
            culprit = next(name for name, value in headers if HEADER_VALUE_FORBIDDEN.search(value))
            raise ResponseError(f"invalid response header {culprit[:64]!r}")
        self.started = True
        if self.more_body:
            self.keep_alive = False  # an early answer: the rest of the body may never come
        if not self.keep_alive and not connection:
            head += b"connection: close\r\n"
        self.bodyless = status in (204, 304) or self.scope["method"] == "HEAD"
        if not self.bodyless:
            if length >= 0:
                self.unsent = length
            elif self.scope["http_version"] == "1.1":
                self.chunked = True
                head += b"transfer-encoding: chunked\r\n"
            else:
                self.keep_alive = False  # HTTP/1.0 without a length: the end of the body ends the connection
        self.head = head + b"\r\n"


class HttpConnection(asyncio.Protocol):
    """The protocol of one client connection."""

    def __init__(self, server: "HttpServer") -> None:
        self.server = server
        self.loop = server.loop
        self.app = server.app
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.parser = httptools.HttpRequestParser(self)
        self.closing = False
        self.write_paused = False
        self._drain_waiter: asyncio.Future[None] | None = None
        self.reading_paused = False
        self._broken = False
        self.client: tuple[str, int] | None = None
        self.local: tuple[str, int] | None = None
        self.scheme = server.scheme
        # The exchange being answered, the one being parsed, and those parsed while another was answered.
        self.current: Exchange | None = None
        self.parsing: Exchange | None = None
        # An HttpError: a request the server refuses itself (400, 431), answered in its turn.
        self.waiting: deque[Exchange | HttpError] = deque()
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._expect_continue = False
        self.idle_since = 0.0  # >0: no request in progress since then (the keep-alive deadline runs)
        self.head_since = 0.0  # >0: a request head began arriving then and is not complete
        self.max_head_bytes = server.max_head_bytes
        # Two lower bounds of the head's size: its parts that reached the callbacks, and the reads that were
        # head from end to end (the head was in progress before them and still is after them).
        self._head_parts = 0
        self._head_reads = 0
        self._refusal: HttpError | None = None  # why a callback stopped the parser
        self._linger: asyncio.TimerHandle | None = None
        # The task that answers the requests, and what it waits on between them.
        self._task: asyncio.Task[None] | None = None
        self._next: asyncio.Future[None] | None = None

    # ---- asyncio.Protocol ----------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.client = _address(transport.get_extra_info("peername"))
        self.local = _address(transport.get_extra_info("sockname"))
        self.idle_since = self.loop.time()
        self.server.connections.add(self)

    def data_received(self, data: bytes) -> None:
        if self._broken:
            return
        self.idle_since = 0.0
        within_head = self.head_since > 0.0
        if not within_head and self.parsing is None:
            self._head_begins()  # between requests every byte is part of the next head, CRLFs included
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # An Upgrade/CONNECT request: what was parsed is answered; the connection ends after it.
            self.stop_parsing()
            if self.current is None:
                self.close()
            return
        except Exception as exc:  # anything the parser or a callback raises means a bad request
            log.debug("refused request from %s: %r", self.client, exc)
            self._refuse(self._refusal or MALFORMED)
            return
        if within_head and self.head_since > 0.0:
            self._head_reads += len(data)
            if self._head_reads > self.max_head_bytes:
                self._refuse(head_too_large(self.max_head_bytes))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        if self._linger is not None:
            self._linger.cancel()
        self.server.connections.discard(self)
        for exchange in (self.current, self.parsing):
            if exchange is not None and not exchange.response_complete and not exchange.disconnected:
                exchange.gone()
        self.waiting.clear()
        self.write_paused = False
        self._wake_drain()
        self._wake_task()

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        self._wake_drain()

    # ---- httptools callbacks -------------------------------------------------------------------------------

    def _head_begins(self) -> None:
        self.head_since = self.loop.time()
        self._head_parts = 0
        self._head_reads = 0

    def _head_too_large(self) -> None:
        """Stop the parser: the head's parts so far exceed `max_head_bytes`."""
        self._refusal = head_too_large(self.max_head_bytes)
        raise ValueError(self._refusal.message)

    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = []
        self._expect_continue = False
        if not self.head_since:
            self._head_begins()

    def on_url(self, url: bytes) -> None:
        self._head_parts += len(url)
        if self._head_parts > self.max_head_bytes:
            self._head_too_large()
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_parts += len(name) + len(value) + HEADER_LINE_OVERHEAD
        if self._head_parts > self.max_head_bytes:
            self._head_too_large()
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            self._expect_continue = True
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.head_since = 0.0
        parser = self.parser
        version = parser.get_http_version()
        url = httptools.parse_url(self._url)
        path = url.path.decode("ascii")
        if "%" in path:
            path = urllib.parse.unquote(path)
        scope = {
            "type": "http",
            "http_version": version,
            "method": parser.get_method().decode("ascii"),
            "scheme": self.scheme,
            "path": path,
            "raw_path": url.path,
            "query_string": url.query or b"",
            "headers": self._headers,
            "client": self.client,
            "server": self.local,
        }
        exchange = Exchange(self, scope, version != "1.0" and parser.should_keep_alive())
        scope[ON_DISCONNECT] = exchange.on_disconnect
        scope[COMPLETE_BODY] = exchange.complete_body
        exchange.expect_continue = self._expect_continue
        self.parsing = exchange
        if self.current is None:
            self._begin(exchange)
        else:
            self.waiting.append(exchange)
            self._pause_reading()

    def on_body(self, body: bytes) -> None:
        exchange = self.parsing
        if exchange is None or exchange.response_complete:
            return
        exchange.body.append(body)
        exchange.body_size += len(body)
        if exchange.body_size > BODY_PAUSE_BYTES:
            self._pause_reading()
        if exchange.waiter is not None:
            exchange.wake()

    def on_message_complete(self) -> None:
        exchange = self.parsing
        self.parsing = None
        if exchange is None:
            return
        exchange.more_body = False
        if exchange.waiter is not None:
            exchange.wake()

    # ---- serving -------------------------------------------------------------------------------------------

    def _begin(self, exchange: Exchange) -> None:
        """Answer `exchange` next, on the connection's task (started by its first request)."""
        self.current = exchange
        if self._task is None:
            self._task = task = self.loop.create_task(self._serve())
            self.server.tasks.add(task)
            task.add_done_callback(self.server.tasks.discard)
        else:
            self._wake_task()

    async def _serve(self) -> None:
        """The connection's task: answers its requests one after the other (one task per connection rather
        than per request), and ends when the connection closes."""
        try:
            while not self.closing:
                exchange = self.current
                if exchange is None:
                    self._next = self.loop.create_future()
                    try:
                        await self._next
                    finally:
                        self._next = None
                    continue
                await self._answer(exchange)
                if self.current is exchange:
                    self.current = None  # the app ended before its response did: the connection is closed
        finally:
            self.close()

    def _wake_task(self) -> None:
        waiter = self._next
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _answer(self, exchange: Exchange) -> None:
        try:
            try:
                await self.app(exchange.scope, exchange.receive, exchange.send)
            except asyncio.CancelledError:
                self.close()
                raise
            except Exception as exc:
                log.error(
                    "the app failed on %s %s", exchange.scope["method"], exchange.scope["path"], exc_info=exc
                )
                if exchange.started or exchange.disconnected:
                    self.close()
                else:
                    exchange.keep_alive = False
                    await send_error(exchange.send, INTERNAL_ERROR)
                return
            if not exchange.response_complete and not exchange.disconnected:
                log.error("the app ended without completing its response to %s", exchange.scope["path"])
                self.close()
        finally:
            # The scope holds the exchange's bound methods: let the pair go by reference counting, not the GC.
            exchange.scope = {}
            exchange.on_gone = None

    def response_done(self, exchange: Exchange) -> None:
        """The response to `exchange` has been written: close, or go on with the next request."""
        self.current = None
        if not exchange.keep_alive or self.closing or self.server.shutting_down:
            if exchange.more_body:
                self.close_unread()
            else:
                self.close()
            return
        if self.waiting:
            following = self.waiting.popleft()
            if isinstance(following, HttpError):
                self.answer_and_close(following)
                return
            self._begin(following)
        else:
            self.idle_since = self.loop.time()
        if self.reading_paused:
            self.resume_reading()

    def resume_reading(self) -> None:
        if not self.reading_paused or self.closing or self._broken or self.waiting:
            return
        parsing = self.parsing
        if parsing is not None and parsing.body_size > BODY_PAUSE_BYTES and not parsing.response_complete:
            return
        self.reading_paused = False
        self.transport.resume_reading()

    def _pause_reading(self) -> None:
        if not self.reading_paused and not self.closing:
            self.reading_paused = True
            self.transport.pause_reading()

    async def drain(self) -> None:
        if self._drain_waiter is None or self._drain_waiter.done():
            self._drain_waiter = self.loop.create_future()
        await asyncio.shield(self._drain_waiter)

    def _wake_drain(self) -> None:
        waiter = self._drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def stop_parsing(self) -> None:
        """Read no more requests: the connection ends after the response in progress."""
        self._broken = True
        self._pause_reading()
        if self.current is not None:
            self.current.keep_alive = False

    def _refuse(self, error: HttpError) -> None:
        """Answer `error` (400 for a malformed request, 431 for a head too large) and close, after the response
        in progress if there is one. A request whose body is malformed ends there: its app sees the client
        disconnect."""
        self._broken = True
        self._pause_reading()
        self.head_since = 0.0
        parsing, current = self.parsing, self.current
        self.parsing = None
        if parsing is not None and parsing is not current:
            self.waiting.remove(parsing)
        if current is None or (parsing is current and not current.started):
            self.answer_and_close(error)
        elif parsing is current:
            self.close()
        else:
            self.waiting.append(error)

    def answer_and_close(self, error: HttpError) -> None:
        """Answer `error` (no request in progress) and close the connection."""
        if self.closing:
            return
        body = error.body()
        self.transport.write(
            b"%bcontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%b"
            % (status_line(error.status), len(body), body)
        )
        self.close_unread()

    def close(self) -> None:
        if not self.closing:
            self.closing = True
            self.transport.close()

    def close_unread(self) -> None:
        """Close a connection whose client may still be sending: stop writing, then drop what arrives for up
        to LINGER_SECONDS (or until the client closes), so a reset does not discard the answer just sent."""
        if self.closing:
            return
        self.closing = True
        self._broken = True
        transport = self.transport
        if transport.can_write_eof():
            transport.write_eof()
        transport.resume_reading()
        self._linger = self.loop.call_later(LINGER_SECONDS, transport.close)

    @property
    def busy(self) -> bool:
        return self.current is not None

    def head_timed_out(self, timeout: float) -> None:
        """A request head has been arriving for longer than `timeout`: 408 and close, or, behind a response in
        progress, read no further."""
        self.head_since = 0.0
        if self.busy:
            self.stop_parsing()
            return
        self.answer_and_close(
            HttpError(
                408,
                f"the request head did not arrive within {timeout:g} s "
                "(motor_coordinator_config.request_limit.head_read_timeout)",
                type_="invalid_request_error",
                code="request_timeout",
            )
        )


def _address(address: Any) -> tuple[str, int] | None:
    if isinstance(address, tuple) and len(address) >= 2:
        return (str(address[0]), int(address[1]))
    return None
