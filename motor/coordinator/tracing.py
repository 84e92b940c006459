"""Traces of the coordinator's requests (`tracer_config`): one span per request (the client's W3C `traceparent`
continued), a child span per attempt (retries and replays are attempts of their own) and a child per leg, whose
context goes to the engine in the leg's `traceparent` header, so the engine's spans join the trace.

Sampling is pyMotor's: `ParentBased` over `TraceIdRatioBased`, one rate per case. With tracing off this module
(and the OpenTelemetry SDK) is never imported: the dispatch holds no tracer and pays one `is None` test per
request, attempt and leg.
"""

from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from motor.config.models import TracerConfig
from motor.runtime.otel import tracer_provider

SERVICE_NAME = "motor-coordinator"
TRACE_HEADERS = (b"traceparent", b"tracestate")


class RequestTracer:
    def __init__(self, config: TracerConfig) -> None:
        sampler = ParentBased(
            root=TraceIdRatioBased(config.root_sampling_rate),
            remote_parent_sampled=TraceIdRatioBased(config.remote_parent_sampled),
            remote_parent_not_sampled=TraceIdRatioBased(config.remote_parent_not_sampled),
            local_parent_sampled=TraceIdRatioBased(config.local_parent_sampled),
            local_parent_not_sampled=TraceIdRatioBased(config.local_parent_not_sampled),
        )
        self.provider = tracer_provider(config.endpoint, SERVICE_NAME, sampler)
        self._tracer = self.provider.get_tracer("motor.coordinator")
        self._propagator = TraceContextTextMapPropagator()

    def request(self, headers: list[tuple[bytes, bytes]], name: str, attributes: Mapping[str, Any]) -> Span:
        carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in headers if k in TRACE_HEADERS}
        parent = self._propagator.extract(carrier) if carrier else None
        return self._tracer.start_span(name, context=parent, kind=SpanKind.SERVER, attributes=attributes)

    def child(self, parent: Span, name: str, attributes: Mapping[str, Any], *, client: bool = False) -> Span:
        kind = SpanKind.CLIENT if client else SpanKind.INTERNAL
        context = trace.set_span_in_context(parent)
        return self._tracer.start_span(name, context=context, kind=kind, attributes=attributes)

    def traceparent(self, span: Span) -> bytes:
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier, context=trace.set_span_in_context(span))
        return carrier.get("traceparent", "").encode()

    def fail(self, span: Span, reason: str) -> None:
        span.set_status(Status(StatusCode.ERROR, reason))
        span.set_attribute("error.type", reason)

    def end(self, span: Span, attributes: Mapping[str, Any] | None = None) -> None:
        if attributes:
            span.set_attributes(attributes)
        span.end()

    def shutdown(self) -> None:
        self.provider.shutdown()
