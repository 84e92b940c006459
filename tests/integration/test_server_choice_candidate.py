"""The uvicorn candidate of benchmarks/server_choice.py: its two scope extensions work, and it serves the
coordinator's apps as the benchmark starts it — so the benchmark cannot measure a broken candidate."""

import asyncio
import json
import re
import sys
import time
from pathlib import Path

import httpx

from motor.coordinator.http.asgi import COMPLETE_BODY, ON_DISCONNECT, Receive, Scope, Send, send_bytes
from motor.coordinator.http.server import listen_socket, serve

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from coordinator_overhead import MODEL, register, scrape, start_coordinator, start_sim
from server_choice import CANDIDATE, LAUNCHERS, MOTOR, served_by
from uvicorn_candidate import UvicornServer


async def test_the_candidate_hands_over_the_complete_body_and_reports_a_disconnect() -> None:
    handed: list[bytes | None] = []
    waiting, gone = asyncio.Event(), asyncio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] == "/body":
            handed.extend([scope[COMPLETE_BODY](), scope[COMPLETE_BODY]()])
            await send_bytes(send, 200, handed[0] or b"")
            return
        scope[ON_DISCONNECT](gone.set)
        waiting.set()
        await gone.wait()

    sock = listen_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    server = UvicornServer(app, keep_alive_timeout=5.0, head_timeout=5.0)
    stop = asyncio.Event()
    serving = asyncio.create_task(serve([(server, sock)], stop))
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /body HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 5\r\n\r\nhello")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 200 ")
        assert await asyncio.wait_for(reader.readexactly(5), 10) == b"hello"
        assert handed == [b"hello", None]  # the whole body once, then nothing more to hand over

        writer.write(
            b"GET /hang HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n"
        )  # same connection: the hooks are per request
        await asyncio.wait_for(waiting.wait(), 10)
        writer.close()
        await asyncio.wait_for(gone.wait(), 10)
    finally:
        stop.set()
        await asyncio.wait_for(serving, 15)


def cancelled_legs(mgmt_port: int) -> float:
    found = re.search(
        r'^motor_coordinator_cancelled_legs_total\{reason="client disconnected"\} (\S+)$',
        scrape(mgmt_port),
        re.M,
    )
    return float(found.group(1)) if found else 0.0


async def test_the_benchmark_serves_the_coordinator_app_through_the_candidate(tmp_path: Path) -> None:
    engine = start_sim("sim-union", tmp_path, "kv_both", ["--itl-ms", "20"])
    try:
        coordinator = start_coordinator("aggregated", tmp_path, launcher=LAUNCHERS[CANDIDATE])
        try:
            register(coordinator.mgmt_port, {"union": engine})
            port = coordinator.process.port
            assert served_by(port) == CANDIDATE != MOTOR
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
                request = {"model": MODEL, "prompt": "hello there", "max_tokens": 3}
                answered = await http.post("/v1/completions", json=request)
                assert answered.status_code == 200, answered.text
                assert answered.json()["choices"][0]["text"]
                streamed = {**request, "max_tokens": 2000, "stream": True}
                async with http.stream("POST", "/v1/completions", content=json.dumps(streamed)) as response:
                    assert response.status_code == 200
                    async for _ in response.aiter_bytes():
                        break  # one chunk, then hang up with the engine leg mid-stream
            deadline = time.monotonic() + 10
            # the disconnect reached the dispatch through ON_DISCONNECT: without it the leg would run ~40 s
            while cancelled_legs(coordinator.mgmt_port) < 1:
                assert time.monotonic() < deadline, coordinator.process.log.read_text()[-3000:]
                await asyncio.sleep(0.05)
        finally:
            coordinator.process.stop()
    finally:
        engine.stop()
