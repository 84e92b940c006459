"""Waiting for an event with a time limit, without losing a cancellation.

`asyncio.wait_for` on Python 3.11 returns the awaited result when a cancellation arrives just as that result
completes, so the caller keeps running although it was cancelled (a stop that does not stop, a request that
outlives its client). `asyncio.timeout` re-raises the cancellation; every timed wait in motor uses it.
"""

import asyncio


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """True once `event` is set, False when `timeout` seconds passed first."""
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return event.is_set()
    return True
