"""What the dispatch of every request in a process shares: the bounds it keeps and the parts of the process it
uses (built once, when the process starts serving; `Core` holds the rest: API keys, limits, the registry)."""

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from motor.config.models import ExceptionConfig, TimeoutConfig
from motor.coordinator.dispatch.callbacks import CallbackRegistry
from motor.coordinator.dispatch.observe import MetricsObserver
from motor.coordinator.http.upstream import UpstreamPool
from motor.coordinator.scheduling.scheduler import Scheduler
from motor.runtime.backoff import Backoff

if TYPE_CHECKING:
    # imported only when tracing is on (it loads the OpenTelemetry SDK)
    from motor.coordinator.tracing import RequestTracer


@dataclass(frozen=True, slots=True)
class DispatchLimits:
    exceptions: ExceptionConfig  # infer_timeout, first_token_timeout
    timeouts: TimeoutConfig  # request_timeout, read_timeout, the prefill legs' own deadlines
    admission_queue_timeout: float  # scheduler_config: the wait for room below an admission bound
    retry_policy: Backoff  # exception_config's max_retry and retry_delay


class CircuitSink(Protocol):
    """Where legs' outcomes go for the instances' circuit breakers (`motor.coordinator.circuits`)."""

    def report(self, instance_id: str, ok: bool) -> None: ...


@dataclass(frozen=True, slots=True)
class DispatchContext:
    loop: asyncio.AbstractEventLoop
    scheduler: Scheduler
    upstream: UpstreamPool
    observer: MetricsObserver
    callbacks: CallbackRegistry  # decode_first's callback URLs
    limits: DispatchLimits
    circuits: CircuitSink | None = None  # None: circuit_config.enable is false
    tracer: "RequestTracer | None" = None  # None: tracer_config.endpoint is empty
