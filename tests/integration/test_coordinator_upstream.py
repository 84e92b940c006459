"""The coordinator's upstream HTTP client against a real (sim) engine: keep-alive reuse, whole and streamed
responses, deadlines, read-silence limits and cancellation by closing the connection."""

import asyncio
import json
from collections.abc import Iterator

import pytest

from motor.coordinator.http.upstream import UpstreamConnection, UpstreamError, UpstreamPool
from tests.fixtures.coordinator import free_port, set_engine_faults, wait_engine_idle
from tests.fixtures.sim import SimEngine, start_sim_engine

HEAD = b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimEngine]:
    started = start_sim_engine(tmp_path_factory.mktemp("upstream"), extra_args=["--itl-ms", "30"])
    yield started
    started.stop()


@pytest.fixture
def healthy(engine: SimEngine) -> Iterator[SimEngine]:
    yield engine
    set_engine_faults(engine, hang=False, slowdown=1.0)
    wait_engine_idle(engine)


def body(**extra: object) -> bytes:
    return json.dumps({"model": "sim-model", "prompt": "hi there", "max_tokens": 3, **extra}).encode()


async def send(
    pool: UpstreamPool, engine: SimEngine, payload: bytes, timeout: float = 10, **kwargs: object
) -> UpstreamConnection:
    return await pool.request(
        engine.host,
        engine.port,
        HEAD % len(payload),
        payload,
        head_deadline=pool.loop.time() + timeout,
        track=[],
        **kwargs,  # type: ignore[arg-type]
    )


async def test_keep_alive_connections_are_reused(healthy: SimEngine) -> None:
    pool = UpstreamPool(connect_timeout=5, write_timeout=5)
    used = []
    alarms = []
    for _ in range(5):
        connection = await send(pool, healthy, body(), whole_silence=5)
        assert connection.status == 200 and connection.complete
        payload = json.loads(connection.whole_body())
        assert payload["usage"]["completion_tokens"] == 3
        used.append(connection)
        alarms.append(connection._alarm)
        connection.release()
    assert all(c is used[0] for c in used), "one keep-alive connection serves sequential requests"
    assert alarms[0] is not None and all(a is alarms[0] for a in alarms), "and one timer their deadlines"
    pool.close()


async def test_streamed_chunks_and_end(healthy: SimEngine) -> None:
    pool = UpstreamPool(connect_timeout=5, write_timeout=5)
    connection = await send(pool, healthy, body(stream=True))
    assert connection.status == 200 and not connection.complete
    assert connection.header(b"content-type").startswith(b"text/event-stream")
    received = b""
    while (chunk := await connection.next_chunk(pool.loop.time() + 5)) is not None:
        received += chunk
    assert received.count(b"data: {") == 3 and received.endswith(b"data: [DONE]\n\n")
    connection.release()
    pool.close()


async def test_read_silence_and_deadline_end_a_hung_leg_and_free_the_engine(healthy: SimEngine) -> None:
    pool = UpstreamPool(connect_timeout=5, write_timeout=5)
    set_engine_faults(healthy, hang=True)
    with pytest.raises(UpstreamError) as caught:
        await send(pool, healthy, body(), timeout=0.5, whole_silence=5)
    assert caught.value.kind == "timeout"
    set_engine_faults(healthy, hang=False)
    # the timed-out leg's connection was closed, so the engine dropped it (checked off the event loop, which
    # has to run for the close to happen)
    await asyncio.to_thread(wait_engine_idle, healthy)

    connection = await send(pool, healthy, body(stream=True, max_tokens=50))
    await connection.next_chunk(pool.loop.time() + 5)
    set_engine_faults(healthy, slowdown=1000.0)  # 30 s between tokens from now on
    with pytest.raises(UpstreamError) as caught:
        while await connection.next_chunk(pool.loop.time() + 0.3) is not None:
            pass
    assert caught.value.kind == "timeout"
    # still slowed down (its next token 30 s away): only the closed connection frees the engine now
    await asyncio.to_thread(wait_engine_idle, healthy)
    set_engine_faults(healthy, slowdown=1.0)
    pool.close()


async def test_abort_cancels_the_leg_at_the_engine(healthy: SimEngine) -> None:
    pool = UpstreamPool(connect_timeout=5, write_timeout=5)
    connection = await send(pool, healthy, body(stream=True, max_tokens=1000))
    await connection.next_chunk(pool.loop.time() + 5)
    connection.abort()
    with pytest.raises(UpstreamError) as caught:
        await connection.next_chunk(pool.loop.time() + 5)
    assert caught.value.kind == "cancelled"
    await asyncio.to_thread(wait_engine_idle, healthy)
    pool.close()


async def test_refused_connection_is_a_connect_error() -> None:
    pool = UpstreamPool(connect_timeout=2, write_timeout=2)
    with pytest.raises(UpstreamError) as caught:
        await pool.request(
            "127.0.0.1", free_port(), HEAD % 2, b"{}", head_deadline=pool.loop.time() + 2, track=[]
        )
    assert caught.value.kind == "connect"
    pool.close()
