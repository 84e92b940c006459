"""Fault injection: the fault set (CLI flags at start, `GET/POST /admin/faults` at runtime) and its effects."""

import asyncio
import random
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Faults(BaseModel):
    """The active faults. `POST /admin/faults` takes any subset of these fields."""

    model_config = ConfigDict(extra="forbid")

    crash_after: int | None = Field(
        default=None, ge=1, description="exit the process after this many more completed requests"
    )
    hang: bool = Field(default=False, description="accept requests and never answer while set")
    slowdown: float = Field(default=1.0, gt=0, description="multiplies every modelled latency")
    error_rate: float = Field(default=0.0, ge=0, le=1, description="share of requests answered with HTTP 500")
    kv_put_fail: bool = Field(default=False, description="writes of KV blocks to the pool fail")
    kv_get_fail: bool = Field(default=False, description="reads of KV blocks from the pool fail")
    kv_corrupt: bool = Field(
        default=False, description="KV blocks read from the pool arrive with flipped bytes"
    )
    health_down: bool = Field(default=False, description="GET /health answers 503")


class FaultInjector:
    """Holds the fault set and applies the faults that act on request flow (hang, errors, crash)."""

    def __init__(self, faults: Faults, *, seed: int, on_crash: Callable[[int], None]) -> None:
        """`on_crash(completed)` ends the process once crash_after requests have completed."""
        self._faults = faults
        self._rng = random.Random(seed)
        self._on_crash = on_crash
        self._completed_since_armed = 0
        self._released = asyncio.Event()
        self._sync_hang()

    @property
    def faults(self) -> Faults:
        return self._faults

    def update(self, changes: dict[str, Any]) -> Faults:
        """Apply a partial update; raises pydantic.ValidationError naming a bad or unknown field."""
        updated = Faults.model_validate({**self._faults.model_dump(), **changes})
        if "crash_after" in changes:
            self._completed_since_armed = 0
        self._faults = updated
        self._sync_hang()
        return updated

    def _sync_hang(self) -> None:
        if self._faults.hang:
            self._released.clear()
        else:
            self._released.set()

    async def hold_while_hanging(self) -> None:
        """Returns once the hang fault is off; the caller's cancellation (client disconnect) ends it too."""
        await self._released.wait()

    def draw_error(self) -> bool:
        rate = self._faults.error_rate
        return rate > 0 and self._rng.random() < rate

    def request_completed(self) -> None:
        crash_after = self._faults.crash_after
        if crash_after is None:
            return
        self._completed_since_armed += 1
        if self._completed_since_armed == crash_after:
            self._on_crash(self._completed_since_armed)
