"""The simulator's HTTP server: a raw ASGI app (no framework, it must be fast) with vLLM's OpenAI routes,
health, Prometheus metrics and the fault admin API.

`/admin/faults` (GET and POST) needs `Authorization: Bearer <MOTOR_SIM_ADMIN_TOKEN>`, a test-only credential
the simulator reads from its environment; without it set, fault injection at runtime is off (403).
"""

import asyncio
import contextlib
import functools
import hmac
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, generate_latest
from pydantic import ValidationError

from motor.engine.sim import sse
from motor.engine.sim.config import OWNED_BY, SimConfig
from motor.engine.sim.ec_storage import EcStorage
from motor.engine.sim.engine import GenerationRequest, Sequence, SimEngine
from motor.engine.sim.errors import SimError, bad_request
from motor.engine.sim.faults import FaultInjector
from motor.engine.sim.metrics import EngineCollector, EngineLoad, EngineMetrics, PoolLinkView
from motor.engine.sim.openai_protocol import ApiRequest, ChunkWriter, Endpoint, full_response, parse_request
from motor.engine.sim.sampling import sampling_seed
from motor.engine.sim.transfer import parse_transfer_params

if TYPE_CHECKING:
    # built only with --otlp-traces-endpoint (it loads the OpenTelemetry SDK)
    from motor.engine.sim.tracing import RequestSpans

log = logging.getLogger(__name__)

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Step = tuple[int, str | None]

ADMIN_TOKEN_ENV = "MOTOR_SIM_ADMIN_TOKEN"
MAX_BODY_BYTES = 32 << 20
_JSON = (b"content-type", b"application/json")
_SSE = (b"content-type", b"text/event-stream; charset=utf-8")
_PROMETHEUS = (b"content-type", b"text/plain; version=0.0.4; charset=utf-8")


async def _send_bytes(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    headers = [*headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _send_json(send: Send, status: int, payload: Any, headers: list[tuple[bytes, bytes]] = ()) -> None:
    await _send_bytes(send, status, sse.dumps(payload), [_JSON, *headers])


async def _send_error(send: Send, error: SimError, headers: list[tuple[bytes, bytes]] = ()) -> None:
    await _send_json(send, error.status, error.body(), headers)


async def _read_body(receive: Receive) -> bytes | None:
    """The whole request body, or None when the client went away before sending it."""
    chunks = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise SimError(413, f"request body larger than {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


async def serve_lifespan(
    receive: Receive,
    send: Send,
    *,
    on_startup: Callable[[], None],
    on_shutdown: Callable[[], Awaitable[None]],
) -> None:
    """The ASGI lifespan protocol: `on_startup` once the loop runs, `on_shutdown` on the way out."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            on_startup()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await on_shutdown()
            await send({"type": "lifespan.shutdown.complete"})
            return


class SimApp:
    def __init__(
        self,
        config: SimConfig,
        *,
        engine: SimEngine,
        faults: FaultInjector,
        metrics: EngineMetrics,
        pool_view: Callable[[], PoolLinkView] | None = None,
        admin_token: str | None = None,
        tracer: "RequestSpans | None" = None,
    ) -> None:
        """`admin_token`: what `/admin/faults` requires (default: MOTOR_SIM_ADMIN_TOKEN; unset: refused)."""
        self._config = config
        token = admin_token if admin_token is not None else os.environ.get(ADMIN_TOKEN_ENV, "")
        self._admin_token = token.encode() if token else None
        self._engine = engine
        self._tracer = tracer
        self._faults = faults
        self._metrics = metrics
        # without a connector, multimodal items are "encoded" here: nothing to hand over
        self._ec = None if config.ec_transfer is None else EcStorage(config.ec_transfer, metrics)
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(
            EngineCollector(
                metrics,
                model_name=config.model_name,
                engine=str(config.engine_index),
                load=self._load,
                pool=pool_view,
            )
        )
        self._routes: dict[tuple[str, str], Callable[[Scope, Receive, Send], Awaitable[None]]] = {
            ("POST", "/v1/completions"): self._completions,
            ("POST", "/v1/chat/completions"): self._chat_completions,
            ("GET", "/v1/models"): self._models,
            ("GET", "/health"): self._health,
            ("GET", "/metrics"): self._prometheus,
            ("GET", "/admin/faults"): self._admin(self._get_faults),
            ("POST", "/admin/faults"): self._admin(self._set_faults),
        }
        self._paths = {path for _, path in self._routes}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            route = self._routes.get((scope["method"], scope["path"]))
            if route is not None:
                await route(scope, receive, send)
            elif scope["path"] in self._paths:
                await _send_error(
                    send, SimError(405, f"method {scope['method']} not allowed on {scope['path']}")
                )
            else:
                await _send_error(send, SimError(404, f"no route {scope['path']}; see docs/sim-engine.md"))
        elif scope["type"] == "lifespan":
            await serve_lifespan(receive, send, on_startup=self.start, on_shutdown=self.close)

    def start(self) -> None:
        self._engine.start()

    async def close(self) -> None:
        await self._engine.close()
        if self._tracer is not None:
            self._tracer.shutdown()  # exports the spans still batched

    # ---- simple routes -----------------------------------------------------------------------------------

    async def _models(self, scope: Scope, receive: Receive, send: Send) -> None:
        created = int(time.time())
        data = [
            {
                "id": name,
                "object": "model",
                "created": created,
                "owned_by": OWNED_BY,
                "root": self._config.model,
                "parent": None,
                "max_model_len": self._config.max_model_len,
                "permission": [],
            }
            for name in self._config.served_model_names
        ]
        await _send_json(send, 200, {"object": "list", "data": data})

    async def _health(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._faults.faults.health_down:
            self._metrics.faults_fired["health_down"] += 1
            await _send_error(send, SimError(503, "unhealthy (injected fault health_down)"))
        else:
            await _send_bytes(send, 200, b"", [])

    def _load(self) -> EngineLoad:
        return EngineLoad(
            running=self._engine.num_running,
            waiting=self._engine.num_waiting,
            kv_cache_usage=self._engine.kv_cache_usage(),
            queued_prefill_tokens=self._engine.queued_prefill_tokens(),
            preemptions=self._engine.num_preemptions,
        )

    async def _prometheus(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _send_bytes(send, 200, generate_latest(self._registry), [_PROMETHEUS])

    def _admin(
        self, route: Callable[[Scope, Receive, Send], Awaitable[None]]
    ) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
        async def checked(scope: Scope, receive: Receive, send: Send) -> None:
            if self._admin_token is None:
                message = f"fault injection at runtime is off: start the simulator with {ADMIN_TOKEN_ENV} set"
                await _send_error(send, SimError(403, message))
                return
            scheme, _, given = (_header(scope, b"authorization") or "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                given.strip().encode(), self._admin_token
            ):
                message = (
                    f"missing or wrong bearer token: /admin/faults needs the simulator's {ADMIN_TOKEN_ENV}"
                )
                await _send_error(send, SimError(401, message))
                return
            await route(scope, receive, send)

        return checked

    async def _get_faults(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _send_json(send, 200, self._faults.faults.model_dump())

    async def _set_faults(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            raw = await _read_body(receive)
            if raw is None:
                return
            changes = self._json_body(raw)
            if not isinstance(changes, dict):
                raise bad_request("POST /admin/faults takes a JSON object of fault fields")
            try:
                faults = self._faults.update(changes)
            except ValidationError as exc:
                error = exc.errors()[0]
                field = ".".join(str(part) for part in error["loc"])
                raise bad_request(f"fault {field}: {error['msg']}", param=field) from None
        except SimError as exc:
            await _send_error(send, exc)
            return
        log.warning("faults set: %s", faults.model_dump(exclude_defaults=True) or "none")
        await _send_json(send, 200, faults.model_dump())

    @staticmethod
    def _json_body(raw: bytes) -> Any:
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise bad_request(f"the request body is not valid JSON: {exc}") from None

    # ---- generation ----------------------------------------------------------------------------------------

    async def _completions(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._generation(scope, receive, send, "completion")

    async def _chat_completions(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._generation(scope, receive, send, "chat")

    async def _generation(self, scope: Scope, receive: Receive, send: Send, endpoint: Endpoint) -> None:
        request_id = _header(scope, b"x-request-id") or os.urandom(16).hex()
        headers = [(b"x-request-id", request_id.encode("latin-1"))]
        try:
            raw = await _read_body(receive)
            if raw is None:
                return
            api = parse_request(endpoint, self._json_body(raw), self._config)
            transfer = parse_transfer_params(api.kv_transfer_params)
            if self._ec is not None:
                await self._ec.hand_over(api.mm_items)
        except SimError as exc:
            if exc.status >= 500:
                log.warning("request %s failed: %s", request_id, exc.message)
            await _send_error(send, exc, headers)
            return
        seq = Sequence(
            GenerationRequest(
                request_id=request_id,
                prompt_token_ids=api.prompt_token_ids,
                max_tokens=api.max_tokens,
                min_tokens=api.min_tokens,
                ignore_eos=api.ignore_eos,
                seed=sampling_seed(api.temperature, api.seed, self._config.seed),
                transfer=transfer,
            )
        )
        exchange = _Exchange(api, seq, send, headers, model=self._config.model_name)
        # receive() now resolves only when the client goes away (or once the response is complete): a
        # disconnect before the last bytes cancels this handler, which closes the sequence and frees its slot.
        handler = asyncio.current_task()
        watcher = asyncio.ensure_future(receive())
        watcher.add_done_callback(functools.partial(_abort_on_disconnect, exchange, handler))
        span = None if self._tracer is None else self._tracer.start(scope["headers"], request_id, api)
        try:
            await self._respond(exchange)
        except asyncio.CancelledError:
            if not exchange.aborted or handler is None:
                raise
            handler.uncancel()
            log.info("request %s: client disconnected, aborted", request_id)
        finally:
            watcher.cancel()
            if span is not None:
                span.end()

    async def _respond(self, exchange: "_Exchange") -> None:
        async with contextlib.aclosing(self._engine.generate(exchange.seq)) as steps:
            try:
                first = await anext(steps)
            except SimError as exc:
                log.info("request %s failed: %s", exchange.seq.request.request_id, exc.message)
                await exchange.send_error(exc)
                return
            except Exception as exc:
                log.exception("request %s: simulator bug", exchange.seq.request.request_id)
                await exchange.send_error(SimError(500, f"motor-sim internal error: {exc!r}"))
                return
            if exchange.api.stream:
                await exchange.stream(first, steps)
            else:
                async for _ in steps:
                    pass
                await exchange.send_full()
        self._faults.request_completed()


def _abort_on_disconnect(
    exchange: "_Exchange", handler: asyncio.Task | None, watcher: asyncio.Future
) -> None:
    if watcher.cancelled() or exchange.final_sent or handler is None:
        return
    exchange.aborted = True
    handler.cancel()


class _Exchange:
    """One generation request's response, streamed or whole."""

    def __init__(
        self, api: ApiRequest, seq: Sequence, send: Send, headers: list[tuple[bytes, bytes]], *, model: str
    ) -> None:
        self.api = api
        self.seq = seq
        self.send = send
        self.headers = headers
        self.model = model
        self.created = int(time.time())
        # Set once the last bytes are on their way: a disconnect after that is the normal end, not an abort.
        self.final_sent = False
        self.aborted = False

    async def send_error(self, error: SimError) -> None:
        self.final_sent = True
        await _send_error(self.send, error, self.headers)

    async def send_full(self) -> None:
        body = full_response(
            self.api, self.seq, rid=self.seq.request.request_id, created=self.created, model=self.model
        )
        self.final_sent = True
        await _send_json(self.send, 200, body, self.headers)

    async def stream(self, first: Step, steps: AsyncIterator[Step]) -> None:
        writer = ChunkWriter(
            self.api, self.seq, rid=self.seq.request.request_id, created=self.created, model=self.model
        )
        await self.send({"type": "http.response.start", "status": 200, "headers": [_SSE, *self.headers]})
        opening = writer.opening()
        if opening is not None:
            await self._chunk(sse.event(opening))
        token, finish = first
        await self._chunk(sse.event(writer.token(token, finish, first=True)))
        async for token, finish in steps:
            await self._chunk(sse.event(writer.token(token, finish, first=False)))
        tail = sse.event(writer.usage()) + sse.DONE if self.api.include_usage else sse.DONE
        self.final_sent = True
        await self.send({"type": "http.response.body", "body": tail})

    async def _chunk(self, data: bytes) -> None:
        await self.send({"type": "http.response.body", "body": data, "more_body": True})
