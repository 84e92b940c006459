"""The OpenAI-compatible API (raw ASGI): /v1/chat/completions, /v1/completions, /v1/models, /health, /version;
and Anthropic's /v1/messages, carried as a chat request (`anthropic.py` translates both ways)."""

import asyncio
import logging
import re
import time
from collections.abc import Collection
from functools import partial
from typing import Any

from motor.coordinator.api.anthropic import AnthropicSend, to_chat
from motor.coordinator.api.health import health, version
from motor.coordinator.client_request import Api, ClientRequest, load_body, parse_request
from motor.coordinator.core import Core
from motor.coordinator.dispatch.dispatch import Dispatch, new_request_id
from motor.coordinator.dispatch.failures import ABORTS, EngineRejected, LegFailure, open_with_retries
from motor.coordinator.dispatch.flows import choose_flow
from motor.coordinator.dispatch.relay import relay_full, relay_replaying, relay_stream
from motor.coordinator.dispatch.replay import (
    Replayer,
    StreamLedger,
    arm,
    engine_context_length,
    replay_refusal,
)
from motor.coordinator.http import jsonio
from motor.coordinator.http.asgi import (
    CLOSE,
    ON_DISCONNECT,
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
from motor.coordinator.http.errors import HttpError
from motor.coordinator.http.server import HttpServer, coordinator_server
from motor.coordinator.http.sse import error_events
from motor.coordinator.registry import Target
from motor.protocol.specs import TlsFiles

log = logging.getLogger(__name__)

API_BY_PATH: dict[str, Api] = {"/v1/chat/completions": "chat", "/v1/completions": "completions"}
MESSAGES_PATH = "/v1/messages"
ANTHROPIC_KEY_HEADER = b"x-api-key"
REQUEST_ID = re.compile(rb"^[A-Za-z0-9._:-]{1,128}$")
RETRY_AFTER = [(b"retry-after", b"1")]


def inference_server(core: Core, tls: TlsFiles | None) -> HttpServer:
    """The OpenAI API's server, its app watching the server's open connections."""
    app = InferenceApp(core)
    server = coordinator_server(app, core.config, tls=tls)
    app.serve_connections(server.connections)
    return server


class InferenceApp:
    def __init__(self, core: Core) -> None:
        self.core = core
        self.created = int(time.time())
        fallback = core.config.scheduler_config.enable_pd_separation_fallback_to_hybrid
        self._choose_flow = partial(choose_flow, core.profile, core.registry, fallback)
        self.max_connections = core.config.request_limit.max_connections
        self.replay = core.config.exception_config.reschedule_config.enable
        self._replayer: Replayer | None = None
        # The server's open connections (`serve_connections`); requests on connections beyond the cap are refused.
        self.connections: Collection[object] = ()

    def serve_connections(self, connections: Collection[object]) -> None:
        self.connections = connections

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if len(self.connections) > self.max_connections:
            await self._too_many_connections(send)
            return
        path = scope["path"]
        api = API_BY_PATH.get(path)
        if api is not None:
            if scope["method"] != "POST":
                await send_error(send, method_not_allowed(scope["method"], path))
                return
            await self._completion(api, scope, receive, send)
        elif path == MESSAGES_PATH:
            if scope["method"] != "POST":
                await send_error(AnthropicSend(send), method_not_allowed(scope["method"], path))
                return
            await self._completion("chat", scope, receive, AnthropicSend(send), messages=True)
        elif path == "/v1/models":
            await self._models(scope, send)
        elif path in ("/health", "/version"):
            await self._about(path, scope, send)
        else:
            await send_error(send, not_found(path))

    async def _too_many_connections(self, send: Send) -> None:
        self.core.metrics.rejected.labels("too_many_connections").inc()
        error = HttpError(
            503,
            f"the coordinator holds its maximum of {self.max_connections} client connections "
            "(motor_coordinator_config.request_limit.max_connections); retry shortly",
            type_="service_unavailable",
            code="too_many_connections",
            headers=[*RETRY_AFTER, CLOSE],
        )
        await send_error(send, error)

    async def _models(self, scope: Scope, send: Send) -> None:
        core = self.core
        try:
            if core.auth is not None:
                await core.auth.check(scope["headers"], client_host(scope))
        except HttpError as error:
            core.metrics.rejected.labels(error.code or "auth").inc()
            await send_error(send, error)
            return
        data = [
            {"id": m, "object": "model", "created": self.created, "owned_by": core.settings.owned_by}
            for m in sorted(core.models())
        ]
        await send_json(send, 200, {"object": "list", "data": data})
        core.metrics.request_done("models", 200)

    async def _about(self, path: str, scope: Scope, send: Send) -> None:
        """Health and version: no API key (load balancers probe without one), not counted as requests."""
        if scope["method"] != "GET":
            await send_error(send, method_not_allowed(scope["method"], path))
            return
        core = self.core
        if path == "/version":
            await send_json(send, 200, version(core.settings.engine_types))
            return
        try:
            body = health(core.profile, core.registry)
        except HttpError as error:
            await send_error(send, error)
            return
        await send_json(send, 200, body)

    async def _completion(
        self, api: Api, scope: Scope, receive: Receive, send: Send, *, messages: bool = False
    ) -> None:
        """`messages`: an Anthropic Messages request, served as the chat request it translates to (`send` is
        then an AnthropicSend), counted under the route `messages`."""
        core = self.core
        route = "messages" if messages else api
        metrics = core.metrics
        started = time.perf_counter()
        admitted = False
        status = 500
        client_rid = header(scope, b"x-request-id")
        if client_rid is not None and not REQUEST_ID.match(client_rid):
            client_rid = None
        request_id = new_request_id()
        dispatch: Dispatch | None = None
        tracer = core.tracer
        span = None
        if tracer is not None:
            span = tracer.request(
                scope["headers"], route, {"http.route": scope["path"], "motor.request_id": request_id}
            )
        try:
            if core.auth is not None:
                bare = ANTHROPIC_KEY_HEADER if messages else None
                await core.auth.check(scope["headers"], client_host(scope), bare_key_header=bare)
            if core.rate is not None:
                self._take_rate_token()
            if not core.in_flight.try_enter():
                raise HttpError(
                    503,
                    f"the coordinator is serving its maximum of {core.config.request_limit.max_requests} requests "
                    "(motor_coordinator_config.request_limit.max_requests); retry shortly",
                    type_="service_unavailable",
                    code="overloaded",
                    headers=RETRY_AFTER,
                )
            admitted = True
            metrics.entered()
            limits = core.config.request_limit
            raw = await read_body(scope, receive, limits.max_body_bytes, limits.body_read_timeout)
            if messages:
                raw = jsonio.dumps(to_chat(load_body(raw, core.config.input_config.max_json_depth)))
            request = parse_request(api, raw, core.models(), core.config.input_config)
            if core.kv is not None:
                await core.kv.prepare(request.body, api, request.demand)
            metrics.arrived(request.demand.prompt_tokens, request.stated_max_tokens)
            ledger = (
                arm(request) if self.replay and request.stream and replay_refusal(request) is None else None
            )
            dispatch = Dispatch(core.dispatch_context, request, request_id, client_rid)
            if span is not None:
                span.set_attributes(
                    {
                        "gen_ai.request.model": request.model,
                        "motor.stream": request.stream,
                        "motor.profile": core.profile.value,
                    }
                )
                dispatch.span = span
            status = await self._serve(dispatch, scope, send, ledger)
        except HttpError as error:
            status = error.status
            if (
                status in (401, 403, 408, 413, 429, 503)
                or status == core.config.rate_limit_config.error_status_code
            ):
                metrics.rejected.labels(error.code or str(status)).inc()
            await send_error(send, error, headers=[(b"x-request-id", client_rid or request_id.encode())])
        finally:
            if admitted:
                core.in_flight.leave()
                metrics.left()
            now = time.perf_counter()
            metrics.request_done(route, status)
            metrics.observe_e2e(route, now - started)
            if span is not None:
                self._end_trace(span, status, dispatch)
            if dispatch is not None:
                metrics.overhead_batch.observe(dispatch.overhead(now - started))
                dispatch.release()

    def _end_trace(self, span: Any, status: int, dispatch: Dispatch | None) -> None:
        tracer = self.core.tracer
        assert tracer is not None
        attributes: dict[str, Any] = {"http.response.status_code": status}
        if dispatch is not None:
            attempt = dispatch.attempt
            attributes["motor.attempts"] = 0 if attempt is None else attempt.number + 1
            attributes["motor.replays"] = dispatch.replays
            if attempt is not None and attempt.client is not None:
                attributes["motor.instance_id"] = attempt.client.target.instance_id
        if status >= 400:
            tracer.fail(span, f"http_{status}")
        tracer.end(span, attributes)

    def _take_rate_token(self) -> None:
        core = self.core
        assert core.rate is not None
        allowed, remaining = core.rate.try_take()
        if allowed:
            return
        config = core.config.rate_limit_config
        raise HttpError(
            config.error_status_code,
            config.error_message,
            type_="rate_limit_error",
            code="rate_limit_exceeded",
            headers=[
                (b"retry-after", b"%d" % max(1, round(core.rate.retry_after()))),
                (b"x-ratelimit-limit", b"%d" % config.max_requests),
                (b"x-ratelimit-remaining", b"%d" % remaining),
            ],
        )

    async def _serve(self, d: Dispatch, scope: Scope, send: Send, ledger: StreamLedger | None) -> int:
        core = self.core
        # given the loop, current_task() skips get_running_loop() and its getpid() system call (Python 3.11)
        d.attach(asyncio.current_task(d.loop))  # type: ignore[arg-type]
        core.active.add(d)
        scope[ON_DISCONNECT](d.client_gone)
        response_started = False
        try:
            try:
                attempt = await open_with_retries(d, self._choose_flow)
            except EngineRejected as rejected:
                await send_bytes(
                    send,
                    rejected.status,
                    rejected.body,
                    content_type=rejected.content_type,
                    headers=[(b"x-request-id", d.rid)],
                )
                return rejected.status
            except LegFailure as failure:
                error = HttpError(
                    failure.status,
                    failure.message,
                    type_=failure.error_type,
                    code=failure.reason,
                    headers=RETRY_AFTER if failure.status == 503 else None,
                )
                await send_error(send, error, headers=[(b"x-request-id", d.rid)])
                return failure.status
            response_started = True
            if ledger is not None:
                return await relay_replaying(attempt, send, core.metrics, ledger, self.replayer())
            if d.request.stream:
                return await relay_stream(attempt, send, core.metrics)
            return await relay_full(attempt, send)
        except asyncio.CancelledError:
            if d.abort_kind is None:
                raise
            asyncio.current_task().uncancel()  # type: ignore[union-attr]
            return await self._aborted(d, send, response_started)
        finally:
            d.close()
            core.active.discard(d)

    def replayer(self) -> Replayer:
        """Built on first use: it needs the upstream pool, which exists once the core started."""
        if self._replayer is None:
            core = self.core
            kv = core.kv

            async def prepare(request: ClientRequest) -> None:
                if kv is not None:
                    await kv.prepare(request.body, request.api, request.demand)

            def targets() -> list[Target]:
                return [t for role in ("union", "decode", "prefill") for t in core.registry.targets(role)]

            read_timeout = core.config.timeout_config.read_timeout
            self._replayer = Replayer(
                choose_flow=self._choose_flow,
                prepare=prepare,
                max_model_len=engine_context_length(targets, core.pool, read_timeout),
                exceptions=core.config.exception_config,
                count=lambda outcome: core.metrics.replays.labels(outcome).inc(),
            )
        return self._replayer

    async def _aborted(self, d: Dispatch, send: Send, response_started: bool) -> int:
        kind = d.abort_kind
        assert kind is not None
        log.info("request %s ended early: %s", d.label, ABORTS[kind].label)
        if kind == "infer_timeout":
            message = (
                f"the request exceeded infer_timeout ({self.core.config.exception_config.infer_timeout:g} s)"
            )
            if not response_started:
                await send_error(send, HttpError(504, message, type_="timeout", code="infer_timeout"))
                return 504
            if d.request.stream and not d.send_pending:
                await send(
                    {"type": "http.response.body", "body": error_events(message, "timeout", "infer_timeout")}
                )
        return ABORTS[kind].status


def client_host(scope: Scope) -> str | None:
    """The client's address as the server saw it (the peer: proxy headers are not trusted)."""
    client = scope.get("client")
    return client[0] if client else None
