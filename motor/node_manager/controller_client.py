"""Calls from the node manager to the controller: register and heartbeat, with its instance credential."""

import aiohttp
from pydantic import BaseModel, ValidationError

from motor.protocol.controller import (
    UNKNOWN_INSTANCE,
    ErrorBody,
    Heartbeat,
    InstanceAck,
    Registration,
    bearer,
)

CALL_TIMEOUT_S = 5.0


class ControllerUnreachable(RuntimeError):
    pass


class NotRegistered(LookupError):
    """The controller does not know this instance (e.g. it restarted without persistence)."""


class Unauthorized(PermissionError):
    pass


class RegistrationRefused(PermissionError):
    """The controller refuses the addresses this node manager announces (its registration policy)."""


class ControllerClient:
    def __init__(self, url: str, credential: str, session: aiohttp.ClientSession) -> None:
        self._url = url
        self._headers = bearer(credential)
        self._session = session

    async def register(self, registration: Registration) -> InstanceAck:
        return await self._post("/controller/register", registration)

    async def heartbeat(self, heartbeat: Heartbeat) -> InstanceAck:
        return await self._post("/controller/heartbeat", heartbeat)

    async def _post(self, path: str, message: BaseModel) -> InstanceAck:
        try:
            async with self._session.post(
                self._url + path,
                json=message.model_dump(mode="json"),
                headers=self._headers,
                timeout=aiohttp.ClientTimeout(total=CALL_TIMEOUT_S),
            ) as response:
                body = await response.read()
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ControllerUnreachable(f"{self._url}{path}: {type(exc).__name__}: {exc}") from exc
        if status == 401:
            raise Unauthorized(
                f"the controller at {self._url} refused this instance's credential (401): give this node manager "
                "the credential `motor deploy` derived from the controller's token for its instance"
            )
        if status == 403:
            raise RegistrationRefused(f"the controller at {self._url} refused: {_error_message(body)}")
        if status == 404 and _error_code(body) == UNKNOWN_INSTANCE:
            raise NotRegistered(self._url)
        if status != 200:
            raise ControllerUnreachable(
                f"{self._url}{path}: HTTP {status}: {body[:200].decode(errors='replace')}"
            )
        try:
            return InstanceAck.model_validate_json(body)
        except ValidationError as exc:
            raise ControllerUnreachable(f"{self._url}{path}: unexpected answer: {exc}") from exc


def _error_code(body: bytes) -> str | None:
    try:
        return ErrorBody.model_validate_json(body).error.code
    except ValidationError:
        return None


def _error_message(body: bytes) -> str:
    try:
        return ErrorBody.model_validate_json(body).error.message
    except ValidationError:
        return body[:200].decode(errors="replace")
