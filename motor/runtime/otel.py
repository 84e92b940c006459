"""OpenTelemetry plumbing shared by the processes that export traces (the coordinator, the simulator): an OTLP
span exporter for an endpoint, its protocol taken from OTEL_EXPORTER_OTLP_TRACES_PROTOCOL (then
OTEL_EXPORTER_OTLP_PROTOCOL) as the OpenTelemetry SDK specifies — `grpc` by default, or `http/protobuf` — and a
tracer provider batching spans to it. The SDK is imported here only, so a process with tracing off never loads it.
"""

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.sdk.trace.sampling import Sampler

PROTOCOL_VARS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
PROTOCOLS = ("grpc", "http/protobuf")
HTTP_TRACES_PATH = "/v1/traces"


def traces_protocol() -> str:
    for name in PROTOCOL_VARS:
        value = os.environ.get(name, "").strip()
        if value:
            if value not in PROTOCOLS:
                raise ValueError(f"{name}={value!r}: motor exports traces over {' or '.join(PROTOCOLS)}")
            return value
    return "grpc"


def span_exporter(endpoint: str) -> "SpanExporter":
    if traces_protocol() == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        return GrpcExporter(endpoint=endpoint, insecure=not endpoint.startswith("https://"))
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    url = (
        endpoint
        if endpoint.rstrip("/").endswith(HTTP_TRACES_PATH)
        else endpoint.rstrip("/") + HTTP_TRACES_PATH
    )
    return HttpExporter(endpoint=url)


def tracer_provider(endpoint: str, service_name: str, sampler: "Sampler | None" = None) -> "TracerProvider":
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": service_name}), sampler=sampler)
    provider.add_span_processor(BatchSpanProcessor(span_exporter(endpoint)))
    return provider
