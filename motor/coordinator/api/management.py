"""The management API: probes, instance refresh from the controller, Prometheus metrics.

Readiness answers 200 with `{"ready": bool, ...}` rather than 503 while instances are missing: a 503 would take
the coordinator out of its Kubernetes Service, and the controller reaches it through that Service to push
the very instances that would make it ready. 503 means only that the coordinator itself is not serving yet.
"""

import hmac
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from pydantic import ValidationError

from motor.coordinator.http.asgi import (
    Receive,
    Scope,
    Send,
    header,
    method_not_allowed,
    not_found,
    read_body,
    send_bytes,
    send_error,
    send_json,
)
from motor.coordinator.http.errors import HttpError, bad_request
from motor.coordinator.registry import ROLES, InstanceRegistry
from motor.protocol.instances import InstanceEvent, RefreshResult

log = logging.getLogger(__name__)
PROMETHEUS_TEXT = b"text/plain; version=0.0.4; charset=utf-8"


class Control(Protocol):
    """What the management API drives: one process, or the supervisor of several workers."""

    registry: InstanceRegistry
    profile: str
    required_roles: Sequence[str]

    def started(self) -> bool: ...

    def liveness(self) -> tuple[bool, dict[str, Any]]: ...

    async def refresh(self, event: InstanceEvent) -> RefreshResult: ...

    def metrics_text(self) -> bytes: ...


class ManagementApp:
    def __init__(
        self,
        control: Control,
        max_body_bytes: int,
        *,
        refresh_token: str | None = None,
        endpoint_load: Callable[[], dict[str, dict[str, float | bool | None]]] | None = None,
    ) -> None:
        """`refresh_token`: the controller's token (MOTOR_CONTROLLER_TOKEN); only callers presenting it as
        `Authorization: Bearer <token>` may change the instance set, and without one nobody may.
        `endpoint_load`: the scheduler's in-flight load per endpoint, where one process holds it (with several
        workers each holds its own and the supervisor none)."""
        self.control = control
        self._endpoint_load = endpoint_load
        self.max_body_bytes = max_body_bytes
        self._refresh_token = refresh_token.encode() if refresh_token else None
        self._routes: dict[tuple[str, str], Callable[[Scope, Receive, Send], Awaitable[None]]] = {
            ("GET", "/startup"): self._startup,
            ("GET", "/readiness"): self._readiness,
            ("GET", "/liveness"): self._liveness,
            ("GET", "/metrics"): self._metrics,
            ("POST", "/instances/refresh"): self._refresh,
            ("GET", "/instances"): self._instances,
        }
        self._paths = {path for _, path in self._routes}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        handler = self._routes.get((scope["method"], scope["path"]))
        if handler is not None:
            await handler(scope, receive, send)
        elif scope["path"] in self._paths:
            await send_error(send, method_not_allowed(scope["method"], scope["path"]))
        else:
            await send_error(send, not_found(scope["path"]))

    async def _startup(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = self.control.started()
        await send_json(
            send, 200 if started else 503, {"status": "ok" if started else "starting", "started": started}
        )

    async def _liveness(self, scope: Scope, receive: Receive, send: Send) -> None:
        alive, detail = self.control.liveness()
        await send_json(send, 200 if alive else 503, {"status": "ok" if alive else "failing", **detail})

    async def _readiness(self, scope: Scope, receive: Receive, send: Send) -> None:
        control = self.control
        registry = control.registry
        counts = {role: len(registry.targets(role)) for role in ROLES}
        missing = [role for role in control.required_roles if not counts[role]]
        if not missing:
            serving = control.profile
        elif counts["union"]:
            serving = "aggregated (fallback on union instances)"
        elif counts["prefill"]:
            serving = "aggregated (fallback on prefill instances)"
        else:
            serving = "none"
        body = {
            "status": "ok" if control.started() else "starting",
            "ready": control.started() and not missing,
            "profile": control.profile,
            "required_roles": control.required_roles,
            "missing_roles": missing,
            "serving": serving,
            "routable_endpoints": counts,
            "instance_set_version": registry.version,
        }
        await send_json(send, 200 if control.started() else 503, body)

    async def _metrics(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send_bytes(send, 200, self.control.metrics_text(), content_type=PROMETHEUS_TEXT)

    async def _instances(self, scope: Scope, receive: Receive, send: Send) -> None:
        registry = self.control.registry
        body: dict[str, Any] = {
            "version": registry.version,
            "instances": [i.model_dump() for i in registry.snapshot()],
            "open_circuits": sorted(registry.open_circuits),
        }
        if self._endpoint_load is not None:
            body["endpoint_load"] = self._endpoint_load()
        await send_json(send, 200, body)

    async def _refresh(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._refresh_token is None:
            await send_error(send, NO_REFRESH_TOKEN)
            return
        if not _bearer_matches(scope, self._refresh_token):
            await send_error(send, UNAUTHORIZED_REFRESH)
            return
        try:
            event = _parse_event(await read_body(scope, receive, self.max_body_bytes))
        except HttpError as error:
            await send_error(send, error)
            return
        result = await self.control.refresh(event)
        log.info(
            "instances %s: %d instance(s) in the event, %d registered, version %d",
            event.event,
            len(event.instances),
            result.instance_count,
            result.version,
        )
        await send_json(send, 200, result.model_dump())


def _refresh_refused(message: str) -> HttpError:
    return HttpError(
        401,
        message,
        type_="authentication_error",
        code="invalid_token",
        headers=[(b"www-authenticate", b'Bearer realm="motor"')],
    )


UNAUTHORIZED_REFRESH = _refresh_refused(
    "missing or wrong bearer token: POST /instances/refresh needs `Authorization: Bearer <token>` with the "
    "MOTOR_CONTROLLER_TOKEN this coordinator was started with (the controller sends its own; give both the same)"
)
NO_REFRESH_TOKEN = _refresh_refused(
    "this coordinator was started without MOTOR_CONTROLLER_TOKEN, so it accepts no POST /instances/refresh: give "
    "it the controller's token"
)


def _bearer_matches(scope: Scope, token: bytes) -> bool:
    scheme, _, given = (header(scope, b"authorization") or b"").partition(b" ")
    return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), token)


def _parse_event(raw: bytes) -> InstanceEvent:
    try:
        return InstanceEvent.model_validate_json(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()[:10]
        )
        raise bad_request(f"invalid instance event: {problems}") from None
