"""Errors the simulator answers with, as OpenAI-style bodies `{"error": {"message", "type", "param", "code"}}`."""

from typing import Any

_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    405: "MethodNotAllowedError",
    413: "RequestEntityTooLargeError",
    500: "InternalServerError",
    502: "BadGatewayError",
    503: "ServiceUnavailableError",
    504: "GatewayTimeoutError",
}


class SimError(Exception):
    """A request failed; `status` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    def body(self) -> dict[str, Any]:
        return error_body(self.status, self.message, param=self.param)


def bad_request(message: str, *, param: str | None = None) -> SimError:
    return SimError(400, message, param=param)


def error_body(status: int, message: str, *, param: str | None = None) -> dict[str, Any]:
    return {
        "error": {
            "message": message,
            "type": _TYPES.get(status, "Error"),
            "param": param,
            "code": status,
        }
    }
