"""A small HTTP/1.1 client for engine legs: pooled keep-alive connections on asyncio protocols + httptools.

Chosen over aiohttp and httpx by measured overhead (see docs/benchmarks.md, Coordinator overhead, and
`benchmarks/coordinator_overhead.py --clients`). It also gives the coordinator exact control over what it
needs: deadlines per wait, a read-silence limit, and `abort()` that closes a leg's connection at once, which is
how a leg is cancelled at the engine.

Timeouts cost one timer per connection, not one per read: the alarm is armed for the earliest moment a wait
could time out, and when it fires early (bytes arrived meanwhile) it re-arms itself for the new limit. It stays
armed across the exchanges of a keep-alive connection (firing while nobody waits does nothing), so a reused
connection usually needs no new timer at all.
"""

import asyncio
from collections import deque

import httptools

# Engines behind uvicorn close idle keep-alive connections after 5 s; expire ours first so a request is not
# written into a connection the engine is closing. A reused connection that still dies before answering is
# retried once on a fresh one (nothing reached the engine's application then).
UPSTREAM_IDLE_SECONDS = 4.0
READ_PAUSE_BYTES = 1 << 20


class UpstreamError(Exception):
    """A leg failed below HTTP: `kind` is connect | timeout | closed | protocol | cancelled."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class UpstreamConnection(asyncio.Protocol):
    """One keep-alive connection; carries one exchange at a time."""

    def __init__(self, pool: "UpstreamPool", key: tuple[str, int]) -> None:
        self._pool = pool
        self._loop = pool.loop
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.reused = False
        self.idle_since = 0.0
        self._waiter: asyncio.Future[None] | None = None
        self._write_paused = False
        self._wake_on_progress = True
        self._last_byte = 0.0
        self._alarm: asyncio.TimerHandle | None = None
        self._alarm_at = 0.0
        self._deadline = 0.0
        self._silence = 0.0
        self._timeout_message = ""
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.keep_alive = False
        self.headers: list[tuple[bytes, bytes]] = []
        self.head_done = False
        self.complete = False
        self.error: UpstreamError | None = None
        self.received_any = False
        self._chunks: list[bytes] = []
        self._buffered = 0

    # ---- asyncio.Protocol ----------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.received_any = True
        self._last_byte = self._loop.time()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(UpstreamError("protocol", f"invalid HTTP from the engine: {exc}"))
            self.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._disarm()
        if not self.complete:
            self._fail(UpstreamError("closed", "the engine closed the connection before the response ended"))
        self._wake()

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake()

    # ---- httptools callbacks -------------------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        # Only meaningful while the message is parsed (httptools answers False after it ended).
        self.keep_alive = self.parser.should_keep_alive()
        self.head_done = True
        if self._wake_on_progress:
            self._wake()

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._buffered += len(body)
        if self._wake_on_progress:
            # Streaming reader: bound what we hold for a slow client (the engine then waits on TCP).
            if self._buffered > READ_PAUSE_BYTES and self.transport is not None:
                self.transport.pause_reading()
            self._wake()

    def on_message_complete(self) -> None:
        self.complete = True
        self._wake()

    # ---- exchange API --------------------------------------------------------------------------------------

    def header(self, name: bytes) -> bytes | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None

    async def next_chunk(self, deadline: float, silence: float = 0.0) -> bytes | None:
        """Body bytes received so far, waiting if there are none: until `deadline`, and (with `silence`) at
        most that long after the last byte. None once the body has ended."""
        while not self._chunks:
            if self.complete:
                return None
            if self.error is not None:
                raise self.error
            await self._wait(deadline, silence, "the engine sent nothing in time")
        data = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
        self._chunks.clear()
        if self._buffered > READ_PAUSE_BYTES and self.transport is not None:
            self.transport.resume_reading()
        self._buffered = 0
        return data

    async def read_body(self, deadline: float, silence: float) -> bytes:
        parts = []
        while (chunk := await self.next_chunk(deadline, silence)) is not None:
            parts.append(chunk)
        return b"".join(parts)

    def whole_body(self) -> bytes:
        """The body of a response that arrived whole (`UpstreamPool.request` with `whole_silence`): no wait."""
        assert self.complete
        data = b"".join(self._chunks)
        self._chunks.clear()
        self._buffered = 0
        return data

    def abort(self) -> None:
        """Close the connection now: this cancels the leg at the engine."""
        self.closed = True
        self._disarm()
        if self.transport is not None:
            self.transport.abort()
        self._fail(UpstreamError("cancelled", "the leg was cancelled by the coordinator"))

    def release(self) -> None:
        """Return to the pool when the exchange finished cleanly, else close. The alarm stays armed: firing
        while nobody waits does nothing, and the next exchange usually needs no new timer."""
        if self.complete and not self.closed and self.keep_alive:
            self._pool._release(self)
        else:
            self.abort()

    # ---- internals -----------------------------------------------------------------------------------------

    def _send(self, data: bytes) -> None:
        self._reset()
        self.parser = httptools.HttpResponseParser(self)
        assert self.transport is not None
        self.transport.write(data)

    async def _wait_head(self, deadline: float) -> None:
        while not self.head_done:
            if self.error is not None:
                raise self.error
            await self._wait(deadline, 0.0, "the engine did not answer in time")

    async def _wait_complete(self, deadline: float, silence: float) -> None:
        """Until the whole response arrived, waking the task once rather than per segment."""
        self._wake_on_progress = False
        try:
            while not self.complete:
                if self.error is not None:
                    raise self.error
                await self._wait(deadline, silence, "the engine did not answer in time")
        finally:
            self._wake_on_progress = True

    async def _drain(self, deadline: float) -> None:
        while self._write_paused and self.error is None:
            await self._wait(
                deadline, 0.0, "writing the request to the engine took longer than write_timeout"
            )
        if self.error is not None:
            raise self.error

    def _wait(self, deadline: float, silence: float, message: str) -> "asyncio.Future[None]":
        """What to await for the exchange's next event (bytes, its end, an error, the alarm): a future, not a
        coroutine, so a wait adds no frame to the leg's await chain. A done waiter left in place is as good
        as none: nothing wakes or expires a done future."""
        loop = self._loop
        self._deadline, self._silence, self._timeout_message = deadline, silence, message
        limit = self._limit()
        if limit <= loop.time():
            self._expire()
            raise self.error or UpstreamError("timeout", message)
        if self._alarm is None or self._alarm_at > limit:
            if self._alarm is not None:
                self._alarm.cancel()
            self._alarm = loop.call_at(limit, self._on_alarm)
            self._alarm_at = limit
        waiter = self._waiter = loop.create_future()
        return waiter

    def _limit(self) -> float:
        if self._silence and self.received_any:
            return min(self._deadline, self._last_byte + self._silence)
        return self._deadline

    def _on_alarm(self) -> None:
        self._alarm = None
        waiter = self._waiter
        if waiter is None or waiter.done():
            return  # nobody waits now; the next wait arms a new alarm
        limit = self._limit()
        if limit > self._loop.time():
            self._alarm = self._loop.call_at(limit, self._on_alarm)
            self._alarm_at = limit
            return
        self._expire()

    def _expire(self) -> None:
        if self._limit() < self._deadline:
            message = f"the engine went silent for longer than the read timeout ({self._silence:g} s)"
        else:
            message = self._timeout_message
        self._fail(UpstreamError("timeout", message))
        self.closed = True
        self._disarm()
        if self.transport is not None:
            self.transport.abort()
        self._wake()

    def _disarm(self) -> None:
        if self._alarm is not None:
            self._alarm.cancel()
            self._alarm = None

    def _fail(self, error: UpstreamError) -> None:
        if self.error is None and not self.complete:
            self.error = error
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class UpstreamPool:
    def __init__(
        self, *, connect_timeout: float, write_timeout: float, idle_timeout: float = UPSTREAM_IDLE_SECONDS
    ) -> None:
        self.connect_timeout = connect_timeout
        self.write_timeout = write_timeout
        self.idle_timeout = idle_timeout
        self.loop = asyncio.get_running_loop()
        self._idle: dict[tuple[str, int], deque[UpstreamConnection]] = {}

    async def request(
        self,
        host: str,
        port: int,
        head: bytes,
        body: bytes,
        *,
        head_deadline: float,
        track: list[UpstreamConnection],
        whole_silence: float | None = None,
    ) -> UpstreamConnection:
        """Send one request and wait for the response head (status and headers) until `head_deadline`, or
        with `whole_silence` (a read-silence limit) for the whole response.

        The connection is appended to `track` as soon as the request is written, so the caller can cancel the
        leg (abort) while the answer is still awaited.
        """
        data = head + body
        connection = self._idle_connection((host, port)) or await self._connect(host, port, head_deadline)
        while True:
            track.append(connection)
            try:
                connection._send(data)
                if connection._write_paused:
                    await connection._drain(min(head_deadline, self.loop.time() + self.write_timeout))
                if whole_silence is None:
                    await connection._wait_head(head_deadline)
                else:
                    await connection._wait_complete(head_deadline, whole_silence)
                return connection
            except BaseException as exc:
                connection.abort()
                retry = isinstance(exc, UpstreamError) and exc.kind == "closed" and connection.reused
                if not retry or connection.received_any:
                    raise
            # a reused connection the engine had closed before any answer: once more on a fresh one
            track.remove(connection)
            connection = await self._connect(host, port, head_deadline)

    def _idle_connection(self, key: tuple[str, int]) -> UpstreamConnection | None:
        """The most recently used idle connection to `key` that is still fresh; the stale ones are closed."""
        idle = self._idle.get(key)
        if not idle:
            return None
        now = self.loop.time()
        while idle:
            connection = idle.pop()
            if not connection.closed and now - connection.idle_since < self.idle_timeout:
                connection.reused = True
                return connection
            connection.abort()
        return None

    async def _connect(self, host: str, port: int, deadline: float) -> UpstreamConnection:
        key = (host, port)
        budget = min(self.connect_timeout, deadline - self.loop.time())
        if budget <= 0:
            raise UpstreamError("timeout", f"no time left to connect to {host}:{port}")
        try:
            async with asyncio.timeout(budget):
                _, protocol = await self.loop.create_connection(
                    lambda: UpstreamConnection(self, key), host, port
                )
        except TimeoutError:
            raise UpstreamError(
                "connect", f"connecting to {host}:{port} timed out after {budget:.3g} s"
            ) from None
        except OSError as exc:
            raise UpstreamError(
                "connect", f"cannot connect to {host}:{port}: {exc.strerror or exc}"
            ) from None
        return protocol

    def _release(self, connection: UpstreamConnection) -> None:
        connection.idle_since = self.loop.time()
        idle = self._idle.setdefault(connection.key, deque())
        while idle and (idle[0].closed or connection.idle_since - idle[0].idle_since >= self.idle_timeout):
            idle.popleft().abort()
        idle.append(connection)

    def close(self) -> None:
        for idle in self._idle.values():
            while idle:
                idle.pop().abort()
        self._idle.clear()


async def get(pool: UpstreamPool, host: str, port: int, path: bytes, timeout: float) -> tuple[int, bytes]:
    """One GET with its whole answer within `timeout`: (status, body); raises UpstreamError."""
    head = b"GET %b HTTP/1.1\r\nhost: %b:%d\r\ncontent-length: 0\r\n\r\n" % (path, host.encode(), port)
    track: list[UpstreamConnection] = []
    deadline = pool.loop.time() + timeout
    try:
        connection = await pool.request(host, port, head, b"", head_deadline=deadline, track=track)
        body = await connection.read_body(deadline, timeout)
    except BaseException:
        for connection in track:
            connection.abort()
        raise
    connection.release()
    return connection.status, body
