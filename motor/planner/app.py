"""The planner's HTTP API (aiohttp): `GET /planner/status` (PlannerStatus: counts, targets, the latest decisions
with their reasons, what it measured), `GET /metrics`, and the probes. It changes nothing: there is nothing to
authenticate for."""

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from motor.planner.metrics import planner_registry
from motor.planner.service import Planner

PLANNER_KEY = web.AppKey("planner", Planner)


def build_app(planner: Planner, healthy: Callable[[], bool]) -> web.Application:
    app = web.Application()
    app[PLANNER_KEY] = planner
    registry = planner_registry(planner)

    async def status(request: web.Request) -> web.Response:
        return web.json_response(planner.status().model_dump(mode="json"))

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def probe(request: web.Request) -> web.Response:
        ok = healthy()
        return web.json_response({"status": "ok" if ok else "unavailable"}, status=200 if ok else 503)

    app.router.add_get("/planner/status", status)
    app.router.add_get("/metrics", metrics)
    for name in ("startup", "readiness", "liveness"):
        app.router.add_get(f"/{name}", probe)
    return app
