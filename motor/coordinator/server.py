"""Running several ASGI apps on uvicorn (uvloop + httptools) in one event loop, on sockets we bind."""

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator
from typing import Any

import uvicorn

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
        http="httptools",
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
