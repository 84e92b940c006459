"""The coordinator's HTTP/1.1 servers: raw ASGI apps on asyncio protocols + httptools, on sockets we bind.

A server holds its open connections (the inference app caps them), closes those idle beyond the keep-alive
timeout and those whose request head has not arrived within `head_timeout` of its first byte (answering 408),
refuses request heads beyond `max_head_bytes` (431, in protocol.py), and on shutdown
stops accepting, closes idle connections, lets requests in progress finish for up to
GRACEFUL_SHUTDOWN_SECONDS, then cancels what is left.
"""

import asyncio
import logging
import socket
from typing import Any

from motor.config.models import CoordinatorConfig
from motor.coordinator.http.protocol import HttpConnection
from motor.protocol.specs import TlsFiles
from motor.runtime.tls import server_context

# 2,000+ clients may connect at once; the kernel caps this at net.core.somaxconn.
BACKLOG = 8192
GRACEFUL_SHUTDOWN_SECONDS = 5.0
SWEEP_SECONDS = 1.0

log = logging.getLogger(__name__)


class HttpServer:
    def __init__(
        self,
        app: Any,
        *,
        keep_alive_timeout: float,
        head_timeout: float,
        max_head_bytes: int,
        tls: TlsFiles | None = None,
    ) -> None:
        """`tls`: serve HTTPS with these files (client certificates required when they name a CA)."""
        self.app = app
        self.keep_alive_timeout = keep_alive_timeout
        self.head_timeout = head_timeout
        self.max_head_bytes = max_head_bytes
        self.ssl = server_context(tls) if tls is not None else None
        self.scheme = "https" if self.ssl is not None else "http"
        self.connections: set[HttpConnection] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.started = False
        self.shutting_down = False
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self._listener: asyncio.Server | None = None
        self._sweeper: asyncio.TimerHandle | None = None

    async def start(self, sock: socket.socket) -> None:
        self.loop = asyncio.get_running_loop()
        self._listener = await self.loop.create_server(
            lambda: HttpConnection(self), sock=sock, ssl=self.ssl, backlog=BACKLOG
        )
        self._sweep_later()
        self.started = True

    def _sweep_later(self) -> None:
        period = min(SWEEP_SECONDS, self.keep_alive_timeout / 4, self.head_timeout / 4)
        self._sweeper = self.loop.call_later(period, self._sweep)

    def _sweep(self) -> None:
        now = self.loop.time()
        idle_before = now - self.keep_alive_timeout
        head_before = now - self.head_timeout
        for connection in list(self.connections):
            if 0.0 < connection.idle_since <= idle_before and not connection.busy:
                connection.close()
            elif 0.0 < connection.head_since <= head_before:
                connection.head_timed_out(self.head_timeout)
        self._sweep_later()

    async def shutdown(self) -> None:
        """Stop accepting; close idle connections; give requests in progress GRACEFUL_SHUTDOWN_SECONDS."""
        if self._listener is None:
            return
        self.shutting_down = True
        if self._sweeper is not None:
            self._sweeper.cancel()
        self._listener.close()
        for connection in list(self.connections):
            if connection.busy:
                connection.stop_parsing()
            else:
                connection.close()
        deadline = self.loop.time() + GRACEFUL_SHUTDOWN_SECONDS
        while (self.connections or self.tasks) and self.loop.time() < deadline:
            await asyncio.sleep(0.05)
        if self.tasks:
            log.warning(
                "cancelling %d request(s) still running after %gs", len(self.tasks), GRACEFUL_SHUTDOWN_SECONDS
            )
            for task in list(self.tasks):
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)
        for connection in list(self.connections):
            connection.transport.abort()
        await self._listener.wait_closed()


def coordinator_server(app: Any, config: CoordinatorConfig, *, tls: TlsFiles | None = None) -> HttpServer:
    """A server for one of the coordinator's apps, its deadlines from the coordinator's config."""
    return HttpServer(
        app,
        keep_alive_timeout=config.timeout_config.keep_alive_timeout,
        head_timeout=config.request_limit.head_read_timeout,
        max_head_bytes=config.request_limit.max_head_bytes,
        tls=tls,
    )


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


async def serve(servers: list[tuple[HttpServer, socket.socket]], stop: asyncio.Event) -> None:
    """Serve until `stop` is set, then shut every server down."""
    try:
        for server, sock in servers:
            await server.start(sock)
        await stop.wait()
    finally:
        results = await asyncio.gather(*(server.shutdown() for server, _ in servers), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                log.error("server stopped with an error: %r", result)


def servers_started(servers: list[tuple[HttpServer, socket.socket]]) -> bool:
    return all(server.started for server, _ in servers)
