"""Attacks on the coordinator's HTTP edge (motor/coordinator/http/server.py, protocol.py), the layer below the
OpenAI API: connection and head limits, early answers, and raw bytes that are not HTTP at all.

- hundreds of connections dribbling CRLFs or a request head byte by byte are all cut off with a 408 after
  `head_read_timeout`, while a real client keeps getting 200s through them;
- a 2 MiB request head is refused with 431 before the API key is looked at, and the connection closes;
- a 401 sent before the body of an `Expect: 100-continue` request closes the connection (no 100 Continue);
- raw-bytes fuzzing (hypothesis): never a 5xx, the process never dies, and every connection the server took is
  gone once the clients are — on a server in this process (many examples) and on a live coordinator.
"""

import asyncio
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from motor.coordinator.http.asgi import Receive, Scope, Send, read_body, send_bytes
from motor.coordinator.http.server import HttpServer, listen_socket
from tests.fixtures.coordinator import CoordinatorProcess, sim_instance, start_coordinator
from tests.fixtures.sim import SimEngine, start_sim_engine
from tests.integration.test_coordinator_api import completion

API_KEY = "edge-test-key"
HEAD_TIMEOUT_S = 2.0
STATUS = re.compile(rb"HTTP/1\.[01] (\d{3}) ")
# /proc/net/tcp states of a server socket that still holds a connection (CLOSE_WAIT: the client left, we did not).
HELD_STATES = {"01", "08"}


def held_connections(port: int) -> int:
    """Server-side TCP sockets on `port` still holding a connection (read from the kernel's tables)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] in HELD_STATES:
                count += 1
    return count


def wait_no_held_connections(port: int, within: float = 15.0) -> None:
    deadline = time.monotonic() + within
    while (held := held_connections(port)) > 0:
        assert time.monotonic() < deadline, f"{held} connection(s) on port {port} still held {within:g} s on"
        time.sleep(0.1)


def exchange_raw(port: int, data: bytes, *, answer_window: float = 0.0) -> bytes:
    """Send `data`, give the server `answer_window` seconds with the connection open, then half-close and read
    all it sends until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        received = b""
        try:
            sock.sendall(data)
            if answer_window:
                sock.settimeout(answer_window)
                try:
                    while chunk := sock.recv(65536):
                        received += chunk
                except TimeoutError:
                    pass
                sock.settimeout(10)
            sock.shutdown(socket.SHUT_WR)
            while chunk := sock.recv(65536):
                received += chunk
        except (ConnectionResetError, BrokenPipeError):
            pass  # the server closed first: what it sent before is still in `received`
        return received


def requests_like(authorization: bytes) -> st.SearchStrategy[bytes]:
    """Bytes near HTTP: valid requests, mutated ones, pieces of request syntax, and plain noise; pipelined."""
    body = json.dumps(completion()).encode()
    valid = [
        b"GET /v1/models HTTP/1.1\r\nhost: c\r\n" + authorization + b"\r\n",
        b"POST /v1/completions HTTP/1.1\r\nhost: c\r\ncontent-type: application/json\r\n"
        + authorization
        + b"content-length: %d\r\n\r\n%b" % (len(body), body),
        b"POST /v1/completions HTTP/1.1\r\ntransfer-encoding: chunked\r\n"
        + authorization
        + b"\r\n%x\r\n%b\r\n0\r\n\r\n" % (len(body), body),
        b"POST /v1/chat/completions HTTP/1.1\r\nexpect: 100-continue\r\ncontent-length: 10\r\n\r\n",
        b"GET /health HTTP/1.0\r\n\r\n",
    ]
    pieces = st.sampled_from(
        [
            b"\r\n",
            b"\n",
            b"\r",
            b" ",
            b":",
            b"\x00",
            b"\xff",
            b"%",
            b"%00",
            b"HTTP/1.1",
            b"HTTP/1.0",
            b"GET ",
            b"POST ",
            b"OPTIONS * ",
            b"CONNECT c:1 ",
            b"/v1/completions",
            b"content-length: 5\r\n",
            b"content-length: -1\r\n",
            b"content-length: 99999999999999999999\r\n",
            b"transfer-encoding: chunked\r\n",
            b"upgrade: websocket\r\nconnection: upgrade\r\n",
            b"expect: 100-continue\r\n",
            b"0\r\n\r\n",
            b"ffffffffffffffff\r\n",
        ]
    )
    edits = st.lists(
        st.tuples(
            st.integers(0, 400), st.sampled_from(["delete", "insert", "replace"]), st.binary(max_size=8)
        ),
        max_size=6,
    )

    def mutate(case: tuple[bytes, list[tuple[int, str, bytes]]]) -> bytes:
        data, changes = case
        for at, kind, chunk in changes:
            at %= len(data) + 1
            if kind == "delete":
                data = data[:at] + data[at + len(chunk) + 1 :]
            elif kind == "insert":
                data = data[:at] + chunk + data[at:]
            else:
                data = data[:at] + chunk + data[at + len(chunk) :]
        return data

    one = st.one_of(
        st.sampled_from(valid),
        st.tuples(st.sampled_from(valid), edits).map(mutate),
        st.lists(st.one_of(pieces, st.binary(max_size=12)), max_size=40).map(b"".join),
        st.binary(max_size=600),
    )
    return st.lists(one, min_size=1, max_size=3).map(b"".join)


def assert_no_5xx(received: bytes, sent: bytes) -> None:
    statuses = [int(status) for status in STATUS.findall(received)]
    assert all(status < 500 for status in statuses), (sent[:300], received[:600])


# ---- a server in this process: many examples, and its own view of its connections -----------------------


async def echo(scope: Scope, receive: Receive, send: Send) -> None:
    body = await read_body(scope, receive, 1 << 20, timeout=5)
    await send_bytes(send, 200, json.dumps({"path": scope["path"], "size": len(body)}).encode())


class ThreadedServer:
    """motor's HTTP server with the echo app on its own event loop in a thread, for blocking fuzz clients."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.server = HttpServer(
            echo, keep_alive_timeout=5.0, head_timeout=HEAD_TIMEOUT_S, max_head_bytes=4096
        )
        sock = listen_socket("127.0.0.1", 0)
        self.port = sock.getsockname()[1]
        self.errors: list[dict] = []
        self.loop.set_exception_handler(lambda _, context: self.errors.append(context))
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(sock), self.loop).result(10)

    def connections(self) -> int:
        return asyncio.run_coroutine_threadsafe(self._count(), self.loop).result(10)

    async def _count(self) -> int:
        return len(self.server.connections)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.shutdown(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture(scope="module")
def threaded_server() -> Iterator[ThreadedServer]:
    server = ThreadedServer()
    try:
        yield server
    finally:
        server.stop()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=requests_like(b""))
def test_raw_bytes_never_get_a_5xx_from_the_server(threaded_server: ThreadedServer, data: bytes) -> None:
    assert_no_5xx(exchange_raw(threaded_server.port, data), data)


def test_the_fuzzed_server_holds_no_connection_and_logged_no_error(threaded_server: ThreadedServer) -> None:
    """Runs after the fuzz above (same module-scoped server): every connection it took is gone."""
    deadline = time.monotonic() + 10
    while (open_connections := threaded_server.connections()) > 0:
        assert time.monotonic() < deadline, f"{open_connections} connection(s) left open"
        time.sleep(0.05)
    assert threaded_server.errors == []
    assert held_connections(threaded_server.port) == 0


# ---- a live coordinator in front of a sim engine, with API keys ---------------------------------------------


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimEngine]:
    started = start_sim_engine(
        tmp_path_factory.mktemp("edge-engine"), kv_role="kv_both", engine_id="edge-union-0"
    )
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def coordinator(tmp_path_factory: pytest.TempPathFactory, engine: SimEngine) -> Iterator[CoordinatorProcess]:
    """The setting of the reviewer's trial: API keys, a 2 s head deadline, 5 s keep-alive."""
    started = start_coordinator(
        tmp_path_factory.mktemp("edge-coordinator"),
        profile="aggregated",
        coordinator_config={
            "api_key_config": {"enable_api_key": True, "valid_keys": [API_KEY]},
            "request_limit": {"head_read_timeout": HEAD_TIMEOUT_S},
            "timeout_config": {"keep_alive_timeout": 5.0},
            "input_config": {"max_tokens": 8},
        },
    )
    try:
        started.register([sim_instance(engine, "union")])
        yield started
    finally:
        started.stop()


AUTHORIZED = {"authorization": f"Bearer {API_KEY}"}


async def test_slowloris_connections_are_cut_off_while_real_requests_get_200(
    coordinator: CoordinatorProcess,
) -> None:
    host, port = coordinator.host, coordinator.infer_port
    head = b"POST /v1/completions HTTP/1.1\r\nhost: c\r\ncontent-length: 2\r\n\r\n{}"

    async def slow(pattern: str) -> bytes:
        """One slow client; returns all the server sent before it closed the connection."""
        reader, writer = await asyncio.open_connection(host, port)
        received = b""
        try:
            if pattern == "one CRLF":
                writer.write(b"\r\n")
            sent = 0
            while not reader.at_eof():
                if pattern == "CRLFs":
                    writer.write(b"\r\n")
                elif pattern == "head byte by byte" and sent < len(head):
                    writer.write(head[sent : sent + 1])
                    sent += 1
                try:  # chunk by chunk: a read cancelled by the timeout loses nothing already received
                    received += await asyncio.wait_for(reader.read(65536), 0.3)
                except TimeoutError:
                    continue
            return received
        except ConnectionResetError:
            return received or b"reset"
        finally:
            writer.close()

    patterns = ["one CRLF", "CRLFs", "head byte by byte"]
    slow_clients = [asyncio.create_task(slow(patterns[i % 3])) for i in range(300)]
    statuses: list[int] = []
    async with httpx.AsyncClient(base_url=coordinator.base_url, timeout=10, headers=AUTHORIZED) as http:
        started = time.monotonic()
        while time.monotonic() - started < 2.5 * HEAD_TIMEOUT_S:
            response = await http.post("/v1/completions", json=completion(max_tokens=2))
            statuses.append(response.status_code)
            await asyncio.sleep(0.1)
    answers = await asyncio.wait_for(asyncio.gather(*slow_clients), HEAD_TIMEOUT_S + 10)
    assert statuses and set(statuses) == {200}, statuses
    refused = [answer for answer in answers if answer.startswith(b"HTTP/1.1 408 ")]
    assert len(refused) == len(answers), [
        answer[:40] for answer in answers if not answer.startswith(b"HTTP/1.1 408")
    ]
    await asyncio.to_thread(wait_no_held_connections, port)


async def test_a_2_mib_head_gets_431_before_the_key_is_looked_at(coordinator: CoordinatorProcess) -> None:
    reader, writer = await asyncio.open_connection(coordinator.host, coordinator.infer_port)
    writer.write(b"POST /v1/completions HTTP/1.1\r\nx-filler: " + b"f" * (2 << 20) + b"\r\n\r\n")
    answer = await asyncio.wait_for(reader.read(), 10)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 ") and b"connection: close" in head, answer[:300]
    assert json.loads(body)["error"]["code"] == "request_header_fields_too_large"
    writer.close()


async def test_an_early_401_to_expect_100_continue_closes_the_connection(
    coordinator: CoordinatorProcess,
) -> None:
    reader, writer = await asyncio.open_connection(coordinator.host, coordinator.infer_port)
    writer.write(
        b"POST /v1/completions HTTP/1.1\r\nhost: c\r\nexpect: 100-continue\r\ncontent-type: application/json\r\n"
        b"content-length: 100\r\n\r\n"
    )
    answer = await asyncio.wait_for(reader.read(), 10)  # returns only when the coordinator closes
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 401 "), answer[:300]
    assert b"connection: close" in head and b"100 Continue" not in answer
    assert json.loads(body)["error"]["type"]
    writer.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=requests_like(f"authorization: Bearer {API_KEY}\r\n".encode()))
def test_raw_bytes_never_get_a_5xx_from_a_live_coordinator(
    coordinator: CoordinatorProcess, data: bytes
) -> None:
    assert_no_5xx(exchange_raw(coordinator.infer_port, data, answer_window=0.15), data)


def test_the_fuzzed_coordinator_lives_and_holds_no_connection(coordinator: CoordinatorProcess) -> None:
    """Runs after the fuzz above (same module-scoped coordinator)."""
    assert coordinator.process.poll() is None, "the coordinator died"
    wait_no_held_connections(coordinator.infer_port)
    response = httpx.post(
        f"{coordinator.base_url}/v1/completions",
        json=completion(max_tokens=2),
        headers=AUTHORIZED,
        timeout=10,
    )
    assert response.status_code == 200, response.text
