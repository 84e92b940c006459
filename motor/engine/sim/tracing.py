"""The simulator's traces, as vLLM's `--otlp-traces-endpoint` gives them: one `llm_request` span per generation
request, a child of the `traceparent` the request came with, exported over OTLP (`motor.runtime.otel`), so a
trace through the coordinator holds the engines' spans too. Built only when the flag is given."""

from typing import Any

from motor.engine.sim.openai_protocol import ApiRequest
from motor.runtime.otel import tracer_provider

TRACE_HEADERS = (b"traceparent", b"tracestate")


class RequestSpans:
    def __init__(self, endpoint: str, service_name: str) -> None:
        from opentelemetry.trace import SpanKind
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.provider = tracer_provider(endpoint, service_name)
        self._tracer = self.provider.get_tracer("motor.engine.sim")
        self._propagator = TraceContextTextMapPropagator()
        self._kind = SpanKind.SERVER

    def start(self, headers: list[tuple[bytes, bytes]], request_id: str, api: ApiRequest) -> Any:
        carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in headers if k in TRACE_HEADERS}
        parent = self._propagator.extract(carrier) if carrier else None
        return self._tracer.start_span(
            "llm_request",
            context=parent,
            kind=self._kind,
            attributes={
                "gen_ai.request.id": request_id,
                "gen_ai.usage.prompt_tokens": len(api.prompt_token_ids),
                "gen_ai.request.max_tokens": api.max_tokens,
            },
        )

    def shutdown(self) -> None:
        self.provider.shutdown()
