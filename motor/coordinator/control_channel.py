"""Supervisor ↔ worker messages: one JSON object per line over a socketpair.

supervisor → worker: {"type": "instances", "version": v, "instances": [Instance, ...]}  (the whole set)
worker → supervisor: {"type": "ready", "callback_port": p} once listening, {"type": "ack", "version": v}
"""

import asyncio
import json
from typing import Any

LINE_LIMIT = 64 << 20


async def open_channel(sock: Any) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_unix_connection(sock=sock, limit=LINE_LIMIT)


def write_message(writer: asyncio.StreamWriter, message: dict[str, Any]) -> None:
    writer.write(json.dumps(message).encode() + b"\n")


async def read_message(reader: asyncio.StreamReader) -> dict[str, Any] | None:
    line = await reader.readline()
    if not line:
        return None
    return json.loads(line)
