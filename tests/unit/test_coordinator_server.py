"""The coordinator's HTTP server: a response head leaves with its body in one write (HeadWithBody)."""

import asyncio
from typing import Any

from motor.coordinator.server import HeadWithBody

HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"


class RecordingTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = self.aborted = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1234) if name == "peername" else default


def wrapped() -> tuple[HeadWithBody, RecordingTransport]:
    real = RecordingTransport()
    return HeadWithBody(real), real  # type: ignore[arg-type]


async def test_head_and_body_leave_in_one_write() -> None:
    transport, real = wrapped()
    transport.write(HEAD)
    assert real.writes == []
    assert transport.get_write_buffer_size() == len(HEAD)
    transport.write(b"{}")
    assert real.writes == [HEAD + b"{}"]
    await asyncio.sleep(0)  # the cancelled flush writes nothing more
    assert real.writes == [HEAD + b"{}"]


async def test_a_head_without_body_is_flushed_at_the_end_of_the_iteration() -> None:
    transport, real = wrapped()
    transport.write(HEAD)
    await asyncio.sleep(0)
    assert real.writes == [HEAD]


async def test_body_chunks_pass_straight_through() -> None:
    transport, real = wrapped()
    transport.write(HEAD)
    transport.write(b"data: 1\n\n")
    transport.write(b"data: 2\n\n")
    assert real.writes == [HEAD + b"data: 1\n\n", b"data: 2\n\n"]


async def test_close_sends_a_held_head_first_and_abort_drops_it() -> None:
    transport, real = wrapped()
    transport.write(HEAD)
    transport.close()
    assert real.writes == [HEAD] and real.closed
    transport, real = wrapped()
    transport.write(HEAD)
    transport.abort()
    await asyncio.sleep(0)
    assert real.writes == [] and real.aborted


async def test_other_calls_reach_the_real_transport() -> None:
    transport, _ = wrapped()
    assert transport.get_extra_info("peername") == ("127.0.0.1", 1234)
