"""A typed message channel over a stream socket (e.g. a socketpair shared with a child process).

Messages are pydantic models, one JSON object per line; the receiving side decodes every line with the
TypeAdapter of the messages it accepts (a union discriminated by a `type` field, as in motor.protocol.workers).
"""

import asyncio
import socket
from typing import Generic, TypeVar

from pydantic import BaseModel, TypeAdapter

LINE_LIMIT = 64 << 20  # an instance set of many thousand instances stays one line

Incoming = TypeVar("Incoming")


def encode(message: BaseModel) -> bytes:
    return message.model_dump_json().encode() + b"\n"


def decode(line: bytes, accepts: TypeAdapter[Incoming]) -> Incoming:
    """Raises pydantic.ValidationError for a line that is not one of the accepted messages."""
    return accepts.validate_json(line)


class Channel(Generic[Incoming]):
    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, accepts: TypeAdapter[Incoming]
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._accepts = accepts

    @property
    def closing(self) -> bool:
        return self._writer.is_closing()

    def send(self, message: BaseModel) -> None:
        """Queue `message`; `drain()` waits until it is written."""
        self._writer.write(encode(message))

    async def drain(self) -> None:
        await self._writer.drain()

    async def receive(self) -> Incoming | None:
        """The next message, or None once the other side closed the channel."""
        line = await self._reader.readline()
        return decode(line, self._accepts) if line else None

    def close(self) -> None:
        self._writer.close()


async def open_channel(sock: socket.socket, accepts: TypeAdapter[Incoming]) -> Channel[Incoming]:
    reader, writer = await asyncio.open_unix_connection(sock=sock, limit=LINE_LIMIT)
    return Channel(reader, writer, accepts)
