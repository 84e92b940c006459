"""A TCP proxy the chaos harness puts in front of one engine, to blackhole its port and open it again.

Blackholed, the proxy behaves like a network that drops every packet for a while: bytes in flight stop in both
directions (they are held, as TCP retransmits them, and flow again once the path is back), and new
connections are taken but get no answer. Open again, everything held goes through. It runs its own event loop
in a thread, so the test can block freely; it listens on 127.0.0.1 only.
"""

import asyncio
import contextlib
import socket
import threading

CHUNK = 65536


class BlackholeProxy:
    def __init__(self, listen_port: int, target_port: int, host: str = "127.0.0.1") -> None:
        self.host = host
        self.listen_port = listen_port
        self.target_port = target_port
        self.forwarded_bytes = 0
        self._open = threading.Event()
        self._open.set()
        self._loop = asyncio.new_event_loop()
        self._resume: asyncio.Event | None = None
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="blackhole-proxy", daemon=True)

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(timeout=10)

    def blackhole(self) -> None:
        self._open.clear()
        self._loop.call_soon_threadsafe(self._ensure_resume().clear)

    def restore(self) -> None:
        self._open.set()
        self._loop.call_soon_threadsafe(self._ensure_resume().set)

    @property
    def blackholed(self) -> bool:
        return not self._open.is_set()

    def close(self) -> None:
        async def shut() -> None:
            if self._server is not None:
                self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        if self._thread.is_alive():
            with contextlib.suppress(TimeoutError, RuntimeError):
                asyncio.run_coroutine_threadsafe(shut(), self._loop).result(timeout=5)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)

    def _ensure_resume(self) -> asyncio.Event:
        if self._resume is None:
            self._resume = asyncio.Event()
            self._resume.set()
        return self._resume

    async def _listen(self) -> None:
        self._ensure_resume()
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.listen_port))
        self._server = await asyncio.start_server(self._serve, sock=sock, backlog=1024)

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        resume = self._ensure_resume()
        await resume.wait()  # a blackholed port answers nothing, not even the connection's first bytes
        try:
            engine_reader, engine_writer = await asyncio.open_connection(self.host, self.target_port)
        except OSError:
            client_writer.close()
            return
        try:
            await asyncio.gather(
                self._pipe(client_reader, engine_writer, resume),
                self._pipe(engine_reader, client_writer, resume),
            )
        finally:
            for writer in (client_writer, engine_writer):
                writer.close()

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, resume: asyncio.Event
    ) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(CHUNK):
                await resume.wait()  # held while blackholed
                writer.write(data)
                self.forwarded_bytes += len(data)
                await writer.drain()
        with contextlib.suppress(ConnectionError, OSError):
            writer.write_eof()
