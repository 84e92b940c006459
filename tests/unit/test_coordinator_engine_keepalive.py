"""timeout_config.engine_client_keepalive_expiry: how long the coordinator keeps an idle connection to an engine.
Against a real keep-alive HTTP server on 127.0.0.1 that counts the connections it accepts."""

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from prometheus_client import CollectorRegistry

from motor.coordinator.http.upstream import UpstreamError, UpstreamPool, get
from tests.unit.test_coordinator_attempt import running_core

ANSWER = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"


class KeepAliveServer:
    """Answers every request with 200 "ok" and keeps the connection open; with `per_connection` set, answers that
    many requests on a connection and closes it when the next one arrives, before answering it."""

    def __init__(self, per_connection: int | None = None) -> None:
        self.per_connection = per_connection
        self.connections = 0
        self.port = 0
        self._server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        answered = 0
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                if self.per_connection is not None and answered >= self.per_connection:
                    break
                answered += 1
                writer.write(ANSWER)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    @asynccontextmanager
    async def running(self) -> AsyncIterator["KeepAliveServer"]:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        try:
            yield self
        finally:
            self._server.close()
            await self._server.wait_closed()


async def test_an_idle_engine_connection_is_reused_within_the_expiry_and_replaced_after_it() -> None:
    config = {"timeout_config": {"engine_client_keepalive_expiry": 0.3}}
    async with running_core(CollectorRegistry(), config) as core, KeepAliveServer().running() as engine:
        assert core.pool.idle_timeout == 0.3
        for _ in range(3):
            assert await get(core.pool, "127.0.0.1", engine.port, b"/health", 5.0) == (200, b"ok")
        assert engine.connections == 1
        await asyncio.sleep(0.5)
        assert await get(core.pool, "127.0.0.1", engine.port, b"/health", 5.0) == (200, b"ok")
        assert engine.connections == 2


async def test_a_reused_connection_closed_before_any_answer_is_retried_once_on_a_fresh_one() -> None:
    async with KeepAliveServer(per_connection=1).running() as engine:
        pool = UpstreamPool(connect_timeout=5, write_timeout=5)
        for connections in (1, 2, 3):  # each request after the first finds its pooled connection closing
            assert await get(pool, "127.0.0.1", engine.port, b"/health", 5.0) == (200, b"ok")
            assert engine.connections == connections
        engine.per_connection = 0  # the fresh connection closes too: no second retry
        with pytest.raises(UpstreamError) as caught:
            await get(pool, "127.0.0.1", engine.port, b"/health", 5.0)
        assert caught.value.kind == "closed" and engine.connections == 4
        pool.close()
