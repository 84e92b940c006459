"""Server-sent events framed as vLLM frames them: `data: <json>\\n\\n` per chunk, then `data: [DONE]\\n\\n`."""

import json
from typing import Any

DONE = b"data: [DONE]\n\n"


def dumps(payload: Any) -> bytes:
    """Compact JSON, as vLLM's pydantic serialisation writes it."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


def event(payload: Any) -> bytes:
    return b"data: " + dumps(payload) + b"\n\n"
