"""Many virtual engines in one process: one ASGI app that hands each connection to the engine owning the local
port it arrived on. Each engine keeps its own state (queue, KV budget, prefix cache, faults, metrics); they
share the event loop and, when there is a pool, the store client.
"""

from motor.engine.sim.app import Receive, Scope, Send, SimApp, serve_lifespan


class VirtualEngines:
    def __init__(self, apps_by_port: dict[int, SimApp]) -> None:
        self._apps = apps_by_port

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send, on_startup=self._start, on_shutdown=self._close)
            return
        await self._apps[scope["server"][1]](scope, receive, send)

    def _start(self) -> None:
        for app in self._apps.values():
            app.start()

    async def _close(self) -> None:
        for app in self._apps.values():
            await app.close()
