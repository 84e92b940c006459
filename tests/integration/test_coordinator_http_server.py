"""The coordinator's HTTP/1.1 server (motor/coordinator/http/server.py, protocol.py) on a real socket, with small
ASGI apps that record what they see: pipelining, disconnects (http.disconnect and the on-disconnect callback),
keep-alive expiry, malformed, slow and oversized heads, write backpressure, request-body flow control, early
answers, Expect: 100-continue, response heads and lengths the app gets wrong, TLS with client certificates,
graceful shutdown. The attacks on a live coordinator are in tests/security/test_coordinator_edge.py."""

import asyncio
import json
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from motor.coordinator.http.asgi import ON_DISCONNECT, Receive, Scope, Send, read_body, send_bytes
from motor.coordinator.http.protocol import HEADER_NAME, KNOWN_HEADER_NAMES
from motor.coordinator.http.server import HttpServer, listen_socket, serve
from motor.protocol.specs import TlsFiles
from motor.runtime.tls import client_context
from tests.fixtures.pki import Pki

App = Callable[[Scope, Receive, Send], Any]


async def echo(scope: Scope, receive: Receive, send: Send) -> None:
    body = await read_body(scope, receive, 1 << 24)
    await send_bytes(send, 200, json.dumps({"path": scope["path"], "size": len(body)}).encode())


@asynccontextmanager
async def running(
    app: App,
    *,
    keep_alive: float = 30.0,
    head_timeout: float = 10.0,
    max_head_bytes: int = 64 << 10,
    tls: TlsFiles | None = None,
) -> AsyncIterator[tuple[HttpServer, int]]:
    sock = listen_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    server = HttpServer(
        app, keep_alive_timeout=keep_alive, head_timeout=head_timeout, max_head_bytes=max_head_bytes, tls=tls
    )
    stop = asyncio.Event()
    serving = asyncio.create_task(serve([(server, sock)], stop))
    while not server.started:
        assert not serving.done(), serving.exception()
        await asyncio.sleep(0.01)
    try:
        yield server, port
    finally:
        stop.set()
        await asyncio.wait_for(serving, 15)


async def read_response(reader: asyncio.StreamReader) -> tuple[bytes, dict[bytes, bytes], bytes]:
    """One response with a content-length: (status line, headers, body)."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    status, *lines = head[:-4].split(b"\r\n")
    headers = {name.lower(): value for name, _, value in (line.partition(b": ") for line in lines)}
    body = await asyncio.wait_for(reader.readexactly(int(headers[b"content-length"])), 10)
    return status, headers, body


async def wait_until(condition: Callable[[], bool], within: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "the condition did not hold in time"
        await asyncio.sleep(0.02)


async def closed(reader: asyncio.StreamReader, within: float = 10.0) -> bytes:
    """Everything the server still sends before it closes the connection."""
    return await asyncio.wait_for(reader.read(), within)


async def test_pipelined_requests_are_answered_one_at_a_time_in_order() -> None:
    active: list[str] = []
    overlapped = False

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        nonlocal overlapped
        overlapped = overlapped or bool(active)
        active.append(scope["path"])
        body = await read_body(scope, receive, 1024)
        await asyncio.sleep(0.1 if scope["path"] == "/first" else 0)
        active.remove(scope["path"])
        await send_bytes(send, 200, scope["path"].encode() + b":" + body)

    async with running(app) as (_, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"POST /first HTTP/1.1\r\ncontent-length: 1\r\n\r\na"
            b"POST /second HTTP/1.1\r\ncontent-length: 2\r\n\r\nbb"
            b"GET /third HTTP/1.1\r\n\r\n"
        )
        answers = [(await read_response(reader))[2] for _ in range(3)]
        writer.close()
    assert answers == [b"/first:a", b"/second:bb", b"/third:"]
    assert not overlapped


async def test_a_client_that_goes_away_is_seen_as_http_disconnect() -> None:
    seen: asyncio.Queue[object] = asyncio.Queue()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await read_body(scope, receive, 1024)
        scope[ON_DISCONNECT](lambda: seen.put_nowait("callback"))
        await seen.put(await receive())  # waits until the client is gone

    async with running(app) as (_, port):
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /wait HTTP/1.1\r\ncontent-length: 2\r\n\r\nhi")
        await writer.drain()
        await asyncio.sleep(0.1)
        assert seen.empty()
        writer.close()
        assert await asyncio.wait_for(seen.get(), 5) == "callback"
        assert await asyncio.wait_for(seen.get(), 5) == {"type": "http.disconnect"}


async def test_idle_keep_alive_connections_expire() -> None:
    async with running(echo, keep_alive=0.5) as (server, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /one HTTP/1.1\r\n\r\n")
        assert (await read_response(reader))[0] == b"HTTP/1.1 200 OK"
        assert await closed(reader, within=5) == b""
        silent_reader, _ = await asyncio.open_connection("127.0.0.1", port)
        assert await closed(silent_reader, within=5) == b"", "a connection that never sends is idle too"
        async with asyncio.timeout(5):  # the server forgets a connection once its close completed
            while server.connections:
                await asyncio.sleep(0.01)


@pytest.mark.parametrize(
    "raw",
    [
        b"GARBAGE\r\n\r\n",
        b"GET / HTTP/1.1\r\nbad header\r\n\r\n",
        b"GET / HTTP/9.9\r\n\r\n",
        b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
        b"POST / HTTP/1.1\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nab",
        b"GET /\x00 HTTP/1.1\r\n\r\n",
    ],
)
async def test_malformed_requests_get_400_and_the_connection_closes(raw: bytes) -> None:
    async with running(echo) as (_, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(raw)
        answer = await closed(reader)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400 "), answer
        assert b"connection: close" in head
        assert json.loads(body)["error"]["type"] == "invalid_request_error"


async def test_a_malformed_request_after_a_good_one_is_answered_after_it() -> None:
    async with running(echo) as (_, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /good HTTP/1.1\r\n\r\nNOT HTTP\r\n\r\n")
        status, _, body = await read_response(reader)
        assert status == b"HTTP/1.1 200 OK" and json.loads(body)["path"] == "/good"
        assert (await closed(reader)).startswith(b"HTTP/1.1 400 ")


async def test_a_slow_request_head_is_cut_off_with_408() -> None:
    async with running(echo, head_timeout=0.5) as (_, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /slow HTTP/1.1\r\nhost: x\r\n")  # ...and the rest never comes
        answer = await closed(reader, within=5)
        assert answer.startswith(b"HTTP/1.1 408 "), answer
        assert json.loads(answer.partition(b"\r\n\r\n")[2])["error"]["code"] == "request_timeout"


async def test_stray_crlfs_start_the_head_clock() -> None:
    """Bytes that never begin a request line (llhttp skips CRLFs before one) still count as a head arriving."""
    async with running(echo, keep_alive=60, head_timeout=0.5) as (server, port):
        once_reader, once_writer = await asyncio.open_connection("127.0.0.1", port)
        once_writer.write(b"\r\n")
        dribble_reader, dribble_writer = await asyncio.open_connection("127.0.0.1", port)

        async def dribble() -> None:
            while not dribble_reader.at_eof():
                dribble_writer.write(b"\r\n")
                await asyncio.sleep(0.05)

        dribbling = asyncio.create_task(dribble())
        for reader in (once_reader, dribble_reader):
            answer = await closed(reader, within=5)
            assert answer.startswith(b"HTTP/1.1 408 "), answer
        dribbling.cancel()
        for writer in (once_writer, dribble_writer):
            writer.close()
        await wait_until(lambda: not server.connections)


def _oversized_heads(size: int) -> dict[str, bytes]:
    return {
        "a long URL": b"GET /" + b"a" * size + b" HTTP/1.1\r\n\r\n",
        "many headers": b"GET / HTTP/1.1\r\n" + b"x-filler: 0123456789abcdef\r\n" * (size // 28) + b"\r\n",
        "one huge header": b"GET / HTTP/1.1\r\nx-huge: " + b"v" * size + b"\r\n\r\n",
        "a huge header that never ends": b"GET / HTTP/1.1\r\nx-huge: " + b"v" * size,
    }


@pytest.mark.parametrize("shape", sorted(_oversized_heads(1)))
async def test_a_head_beyond_the_limit_gets_431_and_the_connection_closes(shape: str) -> None:
    async with running(echo, max_head_bytes=16 << 10) as (server, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(_oversized_heads(2 << 20)[shape])
        answer = await closed(reader)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 431 "), answer[:200]
        assert b"connection: close" in head
        assert json.loads(body)["error"]["code"] == "request_header_fields_too_large"
        writer.close()
        await wait_until(lambda: not server.connections)


async def test_a_head_just_within_the_limit_is_served() -> None:
    headers = b"x-filler: 0123456789abcdef\r\n" * 500  # 14,000 bytes
    async with running(echo, max_head_bytes=16 << 10) as (_, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /" + b"p" * 1000 + b" HTTP/1.1\r\n" + headers + b"\r\n")
        assert (await read_response(reader))[0] == b"HTTP/1.1 200 OK"


async def test_an_early_answer_to_expect_100_continue_closes_the_connection() -> None:
    async def refuse(scope: Scope, receive: Receive, send: Send) -> None:
        await send_bytes(send, 401, b'{"error": "no key"}')

    async with running(refuse) as (server, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /v1/completions HTTP/1.1\r\nexpect: 100-continue\r\ncontent-length: 5000\r\n\r\n")
        answer = await closed(reader)
        assert answer.startswith(b"HTTP/1.1 401 "), "no 100 Continue before an answer that needs no body"
        assert b"connection: close" in answer.partition(b"\r\n\r\n")[0]
        writer.close()
        await wait_until(lambda: not server.connections)


@pytest.mark.parametrize(
    "headers",
    [
        [(b"x-note", b"ok\r\nx-injected: 1")],
        [(b"x-note", b"ok\nx-injected: 1")],
        [(b"x-note", b"nul\x00")],
        [(b"x-request-id", b"id\r\nx-injected: 1")],  # a name the server knows, a value it must still check
        [(b"content-type", b"text/plain\x00")],
        [(b"content-type", b"text/plain"), (b"x-note", b"ok\rx-injected: 1")],
        [(b"x note", b"space in the name")],
        [(b"x-injected:\r\n", b"1")],
        [(b"content-length", b"2"), (b"content-length", b"2")],
        [(b"content-length", b"-2")],
        [(b"transfer-encoding", b"chunked")],
    ],
)
async def test_a_response_head_the_app_gets_wrong_is_a_500_never_written(
    headers: list[tuple[bytes, bytes]],
) -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"ok"})

    async with running(app) as (_, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\n\r\n")
        status, response_headers, _ = await read_response(reader)
        assert status == b"HTTP/1.1 500 Internal Server Error"
        assert b"x-injected" not in response_headers and b"x-note" not in response_headers
        assert await closed(reader) == b""


def test_the_header_names_the_server_does_not_match_again_are_tokens() -> None:
    assert all(HEADER_NAME.fullmatch(name) for name in KNOWN_HEADER_NAMES)


@pytest.mark.parametrize(
    ("sent", "received"),
    [(b"12345", b""), (b"1", b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\n1")],
    ids=["longer: nothing is written", "shorter: what was sent, then the end"],
)
async def test_a_body_that_does_not_match_its_content_length_ends_the_connection(
    sent: bytes, received: bytes
) -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"3")]})
        await send({"type": "http.response.body", "body": sent})

    async with running(app) as (_, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\n\r\nGET /second HTTP/1.1\r\n\r\n")
        assert await closed(reader) == received, "the pipelined request is not answered on a broken framing"


async def test_a_client_that_does_not_read_holds_the_sender_back() -> None:
    """A stream to a client that stops reading: sends wait on the transport instead of buffering."""
    chunk = b"x" * (1 << 20)
    sent = 0

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        nonlocal sent
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for _ in range(256):
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            sent += len(chunk)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async with running(app) as (_, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 16)
        writer.write(b"GET /big HTTP/1.1\r\n\r\n")
        await asyncio.sleep(1.0)
        held = sent
        assert held < 64 << 20, f"{held} bytes sent to a client that read nothing"
        received = 0
        while data := await asyncio.wait_for(reader.read(1 << 20), 10):
            received += len(data)
            if data.endswith(b"0\r\n\r\n"):
                break
        assert sent == 256 * len(chunk) and received > sent
        writer.close()


async def test_a_large_body_is_read_as_the_app_takes_it() -> None:
    """Reading pauses while the app has not taken the buffered body, and resumes as it does."""
    pieces: list[int] = []
    taking = asyncio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await taking.wait()
        while True:
            message = await receive()
            pieces.append(len(message["body"]))
            if not message["more_body"]:
                break
        await send_bytes(send, 200, str(sum(pieces)).encode())

    size = 8 << 20
    async with running(app) as (server, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /upload HTTP/1.1\r\ncontent-length: %d\r\n\r\n" % size)
        writer.write(b"y" * size)
        await asyncio.sleep(0.5)
        (connection,) = server.connections
        assert connection.parsing is not None and connection.parsing.body_size < 1 << 20, "reading paused"
        taking.set()
        await writer.drain()
        assert (await read_response(reader))[2] == str(size).encode()
        assert len(pieces) > 1


async def test_an_answer_before_the_body_was_read_closes_the_connection_and_arrives_whole() -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send_bytes(send, 404 if scope["method"] == "POST" else 200, scope["method"].encode())

    size = 4 << 20
    async with running(app) as (server, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /nowhere HTTP/1.1\r\ncontent-length: %d\r\n\r\n" % size)
        writer.write(b"z" * size + b"GET /next HTTP/1.1\r\n\r\n")
        status, headers, body = await read_response(reader)
        assert (status, headers[b"connection"], body) == (b"HTTP/1.1 404 Not Found", b"close", b"POST")
        assert await closed(reader) == b"", (
            "the pipelined request behind the unread body must not be answered"
        )
        writer.close()
        await wait_until(lambda: not server.connections)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /next HTTP/1.1\r\n\r\n")
        assert (await read_response(reader))[2] == b"GET"


async def test_expect_100_continue_is_answered_when_the_app_reads_the_body() -> None:
    async with running(echo) as (_, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /upload HTTP/1.1\r\nexpect: 100-continue\r\ncontent-length: 3\r\n\r\n")
        assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5) == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(b"abc")
        assert json.loads((await read_response(reader))[2])["size"] == 3


async def test_streams_are_chunked_and_an_app_failure_is_a_500() -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] == "/fail":
            raise RuntimeError("boom")
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]}
        )
        for event in (b"one", b"two"):
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async with running(app) as (_, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /stream HTTP/1.1\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert b"transfer-encoding: chunked" in head
        assert (
            await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), 5) == b"3\r\none\r\n3\r\ntwo\r\n0\r\n\r\n"
        )
        writer.write(b"GET /fail HTTP/1.1\r\n\r\n")
        status, headers, _ = await read_response(reader)
        assert status == b"HTTP/1.1 500 Internal Server Error" and headers[b"connection"] == b"close"


async def test_tls_with_client_certificates(pki: Pki) -> None:
    server_cert, client_cert = pki.issue("server"), pki.issue("client")
    files = TlsFiles(cert_file=str(server_cert.cert), key_file=str(server_cert.key), ca_file=str(pki.ca_file))
    seen: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope["scheme"])
        await echo(scope, receive, send)

    async with running(app, tls=files) as (_, port):
        trusted = client_context(
            TlsFiles(ca_file=str(pki.ca_file), cert_file=str(client_cert.cert), key_file=str(client_cert.key))
        )
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=trusted)
        writer.write(b"POST /secure HTTP/1.1\r\ncontent-length: 2\r\n\r\nok")
        assert json.loads((await read_response(reader))[2]) == {"path": "/secure", "size": 2}
        writer.close()
        anonymous = client_context(TlsFiles(ca_file=str(pki.ca_file)))
        with pytest.raises((ssl.SSLError, ConnectionError, asyncio.IncompleteReadError)):
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=anonymous)
            writer.write(b"GET / HTTP/1.1\r\n\r\n")
            await read_response(reader)
    assert seen == ["https"]


async def test_shutdown_finishes_requests_in_progress_and_closes_idle_connections() -> None:
    release, slow_started = asyncio.Event(), asyncio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] == "/slow":
            slow_started.set()
            await release.wait()
        await send_bytes(send, 200, b"done")

    sock = listen_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    server = HttpServer(app, keep_alive_timeout=30, head_timeout=10, max_head_bytes=64 << 10)
    stop = asyncio.Event()
    serving = asyncio.create_task(serve([(server, sock)], stop))
    while not server.started:
        await asyncio.sleep(0.01)
    idle_reader, idle_writer = await asyncio.open_connection("127.0.0.1", port)
    idle_writer.write(b"GET /quick HTTP/1.1\r\n\r\n")
    await read_response(idle_reader)
    busy_reader, busy_writer = await asyncio.open_connection("127.0.0.1", port)
    busy_writer.write(b"GET /slow HTTP/1.1\r\n\r\n")
    await asyncio.wait_for(slow_started.wait(), 5)  # in progress when the shutdown begins
    stop.set()
    assert await closed(idle_reader, within=5) == b""
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)
    release.set()
    status, headers, body = await read_response(busy_reader)
    assert (status, body, headers[b"connection"]) == (b"HTTP/1.1 200 OK", b"done", b"close")
    await asyncio.wait_for(serving, 10)
