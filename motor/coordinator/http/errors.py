"""OpenAI-style HTTP errors: `{"error": {"message", "type", "param", "code"}}` with the right status."""

import json


class HttpError(Exception):
    """An error answered to the client as an OpenAI error body."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type_: str,
        code: str | None = None,
        param: str | None = None,
        headers: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.code = code
        self.param = param
        self.headers = headers or []

    def body(self) -> bytes:
        return error_body(self.message, self.type, code=self.code, param=self.param)


def error_object(message: str, type_: str, *, code: str | None = None, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def error_body(message: str, type_: str, *, code: str | None = None, param: str | None = None) -> bytes:
    return json.dumps(error_object(message, type_, code=code, param=param)).encode()


def bad_request(message: str, *, param: str | None = None, code: str = "invalid_request") -> HttpError:
    return HttpError(400, message, type_="invalid_request_error", code=code, param=param)
