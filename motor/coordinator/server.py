"""Running several ASGI apps on uvicorn (uvloop + httptools) in one event loop, on sockets we bind."""

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from motor.protocol.specs import TlsFiles
from motor.runtime.tls import server_context

# 2,000+ clients may connect at once; the kernel caps this at net.core.somaxconn.
BACKLOG = 8192
GRACEFUL_SHUTDOWN_SECONDS = 5.0

log = logging.getLogger(__name__)


class EmbeddedServer(uvicorn.Server):
    """A uvicorn server that leaves signal handling to the process that runs it."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class HeadWithBody:
    """A transport that holds a response head (uvicorn writes it on its own) until the next write or the end of
    this loop iteration, so a head and its body leave in one send: one syscall and one wake-up of the client
    per response instead of two. Everything else is passed through to the real transport."""

    __slots__ = ("_flush_handle", "_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._loop = asyncio.get_running_loop()
        self._held: bytes | None = None
        self._flush_handle: asyncio.Handle | None = None

    def write(self, data: bytes) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._flush_handle.cancel()  # type: ignore[union-attr]
            self._transport.write(held + data)
        elif data.startswith(b"HTTP/1.1 "):
            self._held = data
            self._flush_handle = self._loop.call_soon(self._flush)
        else:
            self._transport.write(data)

    def _flush(self) -> None:
        held, self._held = self._held, None
        if held is not None and not self._transport.is_closing():
            self._transport.write(held)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + len(self._held or b"")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class CoalescingHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol writing each response head together with its body (HeadWithBody)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(HeadWithBody(transport))  # type: ignore[arg-type]


def listen_socket(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.setblocking(False)
    return sock


def make_server(
    app: Any, *, keep_alive_timeout: float, log_level: str, tls: TlsFiles | None = None
) -> EmbeddedServer:
    """`tls`: serve HTTPS with these files (client certificates required when they name a CA)."""
    context = server_context(tls) if tls is not None else None
    config = uvicorn.Config(
        app,
        loop="none",
        http=CoalescingHttpToolsProtocol,
        ws="none",
        lifespan="off",
        access_log=False,
        log_config=None,
        log_level="debug" if log_level == "DEBUG" else "warning",
        proxy_headers=False,
        server_header=False,
        date_header=False,
        timeout_keep_alive=int(max(1, round(keep_alive_timeout))),
        timeout_graceful_shutdown=int(GRACEFUL_SHUTDOWN_SECONDS),
        backlog=BACKLOG,
        ssl_context_factory=(lambda _config, _default: context) if context is not None else None,
    )
    return EmbeddedServer(config)


async def serve(servers: list[tuple[EmbeddedServer, socket.socket]], stop: asyncio.Event) -> None:
    """Serve until `stop` is set or a server exits, then shut every server down."""
    tasks = [asyncio.create_task(server.serve(sockets=[sock])) for server, sock in servers]
    stopper = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for server, _ in servers:
            server.should_exit = True
        stopper.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
                log.error("server stopped with an error: %r", result)


def servers_started(servers: list[tuple[EmbeddedServer, socket.socket]]) -> bool:
    return all(server.started for server, _ in servers)
