"""The node manager's HTTP API (aiohttp): status, stop (its instance credential required: the controller
derives it from its token), probes and metrics."""

import hmac
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import ValidationError

from motor.node_manager.metrics import node_manager_registry
from motor.node_manager.service import NodeManager
from motor.protocol.controller import ErrorBody, ErrorDetail
from motor.protocol.node_manager import StopRequest, StopResult

NODE_MANAGER_KEY = web.AppKey("node_manager", NodeManager)
STOP_KEY = web.AppKey("stop", Callable[[str], Awaitable[None]])
METRICS_KEY = web.AppKey("metrics", CollectorRegistry)


def error_response(status: int, message: str, kind: str, code: str | None = None) -> web.Response:
    body = ErrorBody(error=ErrorDetail(message=message, type=kind, code=code))
    return web.json_response(body.model_dump(mode="json"), status=status)


async def status(request: web.Request) -> web.Response:
    return web.json_response(request.app[NODE_MANAGER_KEY].status().model_dump(mode="json"))


async def stop(request: web.Request) -> web.Response:
    node_manager = request.app[NODE_MANAGER_KEY]
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme != "Bearer" or not hmac.compare_digest(
        given.strip().encode(), node_manager.settings.credential.encode()
    ):
        return error_response(
            401,
            "missing or wrong bearer credential: the controller calls with the credential of this instance",
            "authentication_error",
            "invalid_token",
        )
    try:
        stop_request = StopRequest.model_validate_json(await request.read() or b"{}")
    except ValidationError as exc:
        return error_response(400, f"invalid StopRequest: {exc.errors()[0]['msg']}", "invalid_request_error")
    await request.app[STOP_KEY](stop_request.reason or "terminated by the controller")
    return web.json_response(
        StopResult(instance_id=node_manager.settings.instance_id, engine_stopped=True).model_dump(mode="json")
    )


async def metrics(request: web.Request) -> web.Response:
    return web.Response(
        body=generate_latest(request.app[METRICS_KEY]), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )


def probe(
    name: str, healthy: Callable[[NodeManager], bool]
) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        node_manager = request.app[NODE_MANAGER_KEY]
        ok = healthy(node_manager)
        body = {
            "status": "ok" if ok else "unavailable",
            "probe": name,
            "engine_state": node_manager.supervisor.state,
        }
        return web.json_response(body, status=200 if ok else 503)

    return handler


def build_app(
    node_manager: NodeManager, stop_engine: Callable[[str], Awaitable[None]], alive: Callable[[], bool]
) -> web.Application:
    app = web.Application()
    app[NODE_MANAGER_KEY] = node_manager
    app[STOP_KEY] = stop_engine
    app[METRICS_KEY] = node_manager_registry(node_manager.status)
    app.router.add_get("/node-manager/status", status)
    app.router.add_post("/node-manager/stop", stop)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/startup", probe("startup", lambda nm: True))
    app.router.add_get("/readiness", probe("readiness", lambda nm: nm.registered and alive()))
    app.router.add_get("/liveness", probe("liveness", lambda nm: alive()))
    return app
