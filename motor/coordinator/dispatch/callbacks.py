"""decode_first: per-request callback URLs ("metaserver") that decode engines call to get the prefill run.

A URL carries an unguessable token, is valid only while its attempt runs, and is served by the same process
that holds the request (each worker process listens on its own callback port).
"""

import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # import cycle: type hints only — the attempt a callback slot answers
    from motor.coordinator.dispatch.attempt import Attempt

CALLBACK_PATH_PREFIX = "/v1/metaserver/"


@dataclass(eq=False)
class CallbackSlot:
    token: str
    url: str
    attempt: "Attempt"


class CallbackRegistry:
    def __init__(self) -> None:
        self.base_url = ""
        self._slots: dict[str, CallbackSlot] = {}

    def open(self, attempt: "Attempt") -> CallbackSlot:
        if not self.base_url:
            raise RuntimeError("the callback listener is not running; decode_first dispatch needs it")
        token = secrets.token_urlsafe(18)
        slot = CallbackSlot(token, f"{self.base_url}{CALLBACK_PATH_PREFIX}{token}", attempt)
        self._slots[token] = slot
        return slot

    def close(self, slot: CallbackSlot) -> None:
        self._slots.pop(slot.token, None)

    def get(self, token: str) -> CallbackSlot | None:
        return self._slots.get(token)
