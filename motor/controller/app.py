"""The controller's HTTP API (aiohttp): register, heartbeat, terminate, instance listing, probes and metrics.

Registrations and heartbeats authenticate with the credential of the instance they name (a node manager holds
only its own); terminating and listing instances need the controller token.
"""

import hmac
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import BaseModel, ValidationError

from motor.controller.admission import AddressRefused
from motor.controller.metrics import controller_registry
from motor.controller.service import Controller, UnknownInstance
from motor.protocol.controller import (
    UNKNOWN_INSTANCE,
    ErrorBody,
    ErrorDetail,
    Heartbeat,
    Registration,
    TerminateRequest,
)
from motor.protocol.credentials import instance_credential

log = logging.getLogger(__name__)

CONTROLLER_KEY = web.AppKey("controller", Controller)
HEALTH_KEY = web.AppKey("health", Callable[[], bool])
METRICS_KEY = web.AppKey("metrics", CollectorRegistry)

# How long a `stopped` heartbeat waits for the coordinators' acknowledgement: less than the node manager waits
# for its answer (2 s), so that it still hears back.
STOPPED_ROUTING_WAIT_S = 1.5

M = TypeVar("M", bound=BaseModel)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error_response(
    status: int, message: str, kind: str, code: str | None = None, param: str | None = None
) -> web.Response:
    body = ErrorBody(error=ErrorDetail(message=message, type=kind, param=param, code=code))
    return web.json_response(body.model_dump(mode="json"), status=status)


def json_model(model: BaseModel, status: int = 200) -> web.Response:
    return web.json_response(model.model_dump(mode="json"), status=status)


# Node managers call these with their instance credential; every other /controller/ path needs the token.
INSTANCE_PATHS = frozenset({"/controller/register", "/controller/heartbeat"})

_WRONG_CREDENTIAL = (
    "missing or wrong instance credential: a node manager sends `Authorization: Bearer <credential>` with the "
    "credential of the instance it names, which `motor deploy` derives from the controller token"
)


def authorized(request: web.Request, token: str) -> bool:
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    return scheme == "Bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


def unauthorized(message: str) -> web.Response:
    return error_response(401, message, "authentication_error", "invalid_token")


@web.middleware
async def require_token(request: web.Request, handler: Handler) -> web.StreamResponse:
    path = request.path
    if path.startswith("/controller/") and path not in INSTANCE_PATHS:
        if not authorized(request, request.app[CONTROLLER_KEY].settings.token):
            return unauthorized(
                "missing or wrong bearer token: send `Authorization: Bearer <token>` with the token the controller "
                "was started with (MOTOR_CONTROLLER_TOKEN)"
            )
    elif path in INSTANCE_PATHS and not request.headers.get("Authorization", "").startswith("Bearer "):
        return unauthorized(_WRONG_CREDENTIAL)
    return await handler(request)


def instance_authorized(request: web.Request, instance_id: str) -> bool:
    return authorized(request, instance_credential(request.app[CONTROLLER_KEY].settings.token, instance_id))


async def parse(request: web.Request, model: type[M]) -> M:
    try:
        return model.model_validate_json(await request.read())
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or None
        raise web.HTTPBadRequest(
            text=ErrorBody(
                error=ErrorDetail(
                    message=f"invalid {model.__name__}: {where or 'body'}: {first['msg']}",
                    type="invalid_request_error",
                    param=where,
                )
            ).model_dump_json(),
            content_type="application/json",
        ) from exc


def unknown(instance_id: str) -> web.Response:
    return error_response(
        404,
        f"instance {instance_id!r} is not registered with this controller; register it again",
        "not_found_error",
        UNKNOWN_INSTANCE,
        "instance_id",
    )


async def register(request: web.Request) -> web.Response:
    registration = await parse(request, Registration)
    if not instance_authorized(request, registration.instance_id):
        log.warning("refused a registration of %s: wrong instance credential", registration.instance_id)
        return unauthorized(_WRONG_CREDENTIAL)
    try:
        return json_model(request.app[CONTROLLER_KEY].register(registration))
    except AddressRefused as exc:
        return error_response(
            403, f"registration refused: {exc}", "permission_error", "address_not_allowed", exc.field
        )


async def heartbeat(request: web.Request) -> web.Response:
    beat = await parse(request, Heartbeat)
    if not instance_authorized(request, beat.instance_id):
        return unauthorized(_WRONG_CREDENTIAL)
    controller = request.app[CONTROLLER_KEY]
    try:
        ack = controller.heartbeat(beat)
    except UnknownInstance:
        return unknown(beat.instance_id)
    # The node manager stops its engine once a `stopped` heartbeat is answered: let the coordinators stop
    # routing to it first, so that no new request reaches an engine that is shutting down.
    if beat.engine_state == "stopped" and not await controller.pusher.settled(STOPPED_ROUTING_WAIT_S):
        log.warning("%s stops before every coordinator acknowledged its removal", beat.instance_id)
    return json_model(ack)


async def terminate_instance(request: web.Request) -> web.Response:
    terminate = await parse(request, TerminateRequest)
    try:
        return json_model(await request.app[CONTROLLER_KEY].terminate(terminate))
    except UnknownInstance:
        return unknown(terminate.instance_id)


async def instances(request: web.Request) -> web.Response:
    return json_model(request.app[CONTROLLER_KEY].state())


async def metrics(request: web.Request) -> web.Response:
    return web.Response(
        body=generate_latest(request.app[METRICS_KEY]), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )


def probe(name: str) -> Handler:
    async def handler(request: web.Request) -> web.Response:
        healthy = request.app[HEALTH_KEY]()
        return web.json_response(
            {"status": "ok" if healthy else "unavailable", "probe": name}, status=200 if healthy else 503
        )

    return handler


def build_app(controller: Controller, healthy: Callable[[], bool]) -> web.Application:
    app = web.Application(middlewares=[require_token])
    app[CONTROLLER_KEY] = controller
    app[HEALTH_KEY] = healthy
    app[METRICS_KEY] = controller_registry(controller.state)
    app.router.add_post("/controller/register", register)
    app.router.add_post("/controller/heartbeat", heartbeat)
    app.router.add_post("/controller/terminate_instance", terminate_instance)
    app.router.add_get("/controller/instances", instances)
    app.router.add_get("/metrics", metrics)
    for name in ("startup", "readiness", "liveness"):
        app.router.add_get(f"/{name}", probe(name))
    return app
