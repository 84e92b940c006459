"""A candidate for the coordinator's HTTP server, measured by server_choice.py: uvicorn's httptools protocol
(`uvicorn.protocols.http.httptools_impl.HttpToolsProtocol`) carrying the two scope extensions motor's apps use
(motor/coordinator/http/asgi.py), behind the interface of motor's `HttpServer`.

    PYTHONPATH=. .venv/bin/python benchmarks/uvicorn_candidate.py --spec FILE

runs the coordinator (`python -m motor.coordinator --spec FILE`, single process: the workers a supervisor
starts run motor's own server) with every listener built from `UvicornServer` instead of `HttpServer`.

uvicorn is set up at its leanest, as one would deploy it behind a proxy-free API: no access log, no proxy-headers
middleware, no `server`/`date` headers (motor sends neither), no WebSocket upgrades, no lifespan. It has no
deadline for a request head: `head_timeout` is accepted for the interface and not enforced.
"""

import asyncio
import socket
import sys
from collections import deque
from collections.abc import Callable
from typing import Any

import uvicorn
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

import motor.coordinator.http.server as server_module
from motor.coordinator.http.asgi import COMPLETE_BODY, ON_DISCONNECT
from motor.protocol.specs import TlsFiles
from motor.runtime.tls import server_context


class RequestHooks:
    """The two extensions of one request's scope, over uvicorn's request/response cycle.

    COMPLETE_BODY() hands over the whole body once it has all arrived, the first time it is asked (the
    coordinator asks before any receive(), in asgi.read_body); ON_DISCONNECT(callback) has callback() called
    when the client goes away before the response ended. The cycle is let go when the response ends, so that
    the scope (which holds these bound methods) and the cycle are freed by reference counting.
    """

    __slots__ = ("body_taken", "cycle", "disconnected", "flow", "loop", "on_gone")

    def __init__(
        self, cycle: RequestResponseCycle, flow: FlowControl, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.cycle: RequestResponseCycle | None = cycle
        self.flow = flow
        self.loop = loop
        self.body_taken = False
        self.disconnected = False
        self.on_gone: Callable[[], None] | None = None

    def complete_body(self) -> bytes | None:
        cycle = self.cycle
        if cycle is None or cycle.more_body or self.body_taken:
            return None
        self.body_taken = True
        body = bytes(cycle.body)
        cycle.body = bytearray()
        self.flow.resume_reading()  # reading pauses beyond uvicorn's high-water mark until the body is taken
        return body

    def on_disconnect(self, callback: Callable[[], None]) -> None:
        if self.disconnected:
            self.loop.call_soon(callback)
        else:
            self.on_gone = callback

    def gone(self) -> None:
        self.disconnected = True
        callback, self.on_gone = self.on_gone, None
        self.cycle = None
        if callback is not None:
            callback()

    def release(self) -> None:
        self.cycle = None
        self.on_gone = None


class HookedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol whose scopes carry motor's ON_DISCONNECT and COMPLETE_BODY."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hooked: deque[RequestHooks] = deque()  # the requests whose response has not ended, oldest first

    def on_headers_complete(self) -> None:
        super().on_headers_complete()  # made self.cycle for this request (WebSocket upgrades are off)
        hooks = RequestHooks(self.cycle, self.flow, self.loop)
        self.scope[ON_DISCONNECT] = hooks.on_disconnect  # type: ignore[typeddict-unknown-key]
        self.scope[COMPLETE_BODY] = hooks.complete_body  # type: ignore[typeddict-unknown-key]
        self.hooked.append(hooks)

    def on_response_complete(self) -> None:
        hooked = self.hooked
        while hooked and (hooked[0].cycle is None or hooked[0].cycle.response_complete):
            hooked.popleft().release()
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        hooked, self.hooked = self.hooked, deque()
        for hooks in hooked:
            hooks.gone()


class UvicornServer:
    """What the coordinator uses of motor's `HttpServer` (start, shutdown, started, connections — the inference
    app counts them against its cap), serving through `HookedHttpToolsProtocol`; the same graceful shutdown."""

    def __init__(
        self,
        app: Any,
        *,
        keep_alive_timeout: float,
        head_timeout: float,  # not enforced: uvicorn has no deadline for a request head
        max_head_bytes: int = 64 << 10,  # not enforced: uvicorn's httptools protocol has no head limit
        tls: TlsFiles | None = None,
    ) -> None:
        self.config = uvicorn.Config(
            app,
            http=HookedHttpToolsProtocol,
            ws="none",
            lifespan="off",
            interface="asgi3",
            log_config=None,
            log_level="warning",
            access_log=False,
            proxy_headers=False,
            server_header=False,
            date_header=False,
            timeout_keep_alive=keep_alive_timeout,  # type: ignore[arg-type]
        )
        self.config.load()
        self.ssl = server_context(tls) if tls is not None else None
        self.state = ServerState()
        self.connections = self.state.connections
        self.tasks = self.state.tasks
        self.started = False
        self.shutting_down = False
        self._listener: asyncio.Server | None = None

    async def start(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        config, state = self.config, self.state
        self._listener = await loop.create_server(
            lambda: HookedHttpToolsProtocol(config, state, {}, _loop=loop),
            sock=sock,
            ssl=self.ssl,
            backlog=server_module.BACKLOG,
        )
        self.started = True

    async def shutdown(self) -> None:
        """Stop accepting; close idle connections; give requests in progress GRACEFUL_SHUTDOWN_SECONDS."""
        if self._listener is None:
            return
        self.shutting_down = True
        loop = asyncio.get_running_loop()
        self._listener.close()
        for connection in list(self.connections):
            connection.shutdown()
        deadline = loop.time() + server_module.GRACEFUL_SHUTDOWN_SECONDS
        while (self.connections or self.tasks) and loop.time() < deadline:
            await asyncio.sleep(0.05)
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for connection in list(self.connections):
            connection.transport.abort()
        await self._listener.wait_closed()


def install() -> None:
    """Have the coordinator build every server from `UvicornServer`: `coordinator_server()` instantiates the
    class its module names `HttpServer` when it is called, so this takes effect for servers made afterwards."""
    server_module.HttpServer = UvicornServer  # type: ignore[misc, assignment]


if __name__ == "__main__":
    from motor.coordinator.__main__ import main

    install()
    sys.exit(main())
