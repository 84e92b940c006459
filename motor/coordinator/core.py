"""Per-process runtime state of the inference side: instances, scheduler, upstream pool, limits, metrics."""

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING

from motor.config.models import CircuitConfig, TracerConfig
from motor.coordinator.api.auth import ApiKeyVerifier
from motor.coordinator.api.limits import InFlightLimit, SharedState, TokenBucket
from motor.coordinator.circuits.keeper import CircuitKeeper
from motor.coordinator.dispatch.callbacks import CallbackRegistry
from motor.coordinator.dispatch.context import CircuitSink, DispatchContext, DispatchLimits
from motor.coordinator.dispatch.observe import MetricsObserver
from motor.coordinator.http.upstream import UpstreamPool
from motor.coordinator.kv_events.routing import KvRouting
from motor.coordinator.metrics import CoordinatorMetrics
from motor.coordinator.registry import InstanceRegistry
from motor.coordinator.scheduling.kv_affinity import KvAffinityWeights
from motor.coordinator.scheduling.prefill_stats import StallPolicy
from motor.coordinator.scheduling.scheduler import Scheduler
from motor.coordinator.settings import CoordinatorSettings
from motor.runtime.backoff import Backoff
from motor.tokenize import load_prompt_tokenizer

if TYPE_CHECKING:
    from motor.coordinator.dispatch.dispatch import Dispatch
    from motor.coordinator.tracing import RequestTracer

MAX_SWEEP_INTERVAL = 0.5


class Core:
    def __init__(
        self,
        settings: CoordinatorSettings,
        metrics: CoordinatorMetrics,
        *,
        shared: SharedState | None = None,
        worker_index: int = 0,
        circuit_reporter: CircuitSink | None = None,
    ) -> None:
        """`circuit_reporter`: where a worker process sends its legs' outcomes (its supervisor keeps the
        breakers); without one this process keeps them itself (`circuit_keeper`)."""
        config = settings.config
        self.settings = settings
        self.config = config
        self.profile = settings.profile
        self.metrics = metrics
        self.observer = MetricsObserver(metrics)
        exceptions = config.exception_config
        # max_retry retries after the first attempt, retry_delay * 2**n before retry n + 1
        self.retry_policy = Backoff(initial_s=exceptions.retry_delay, max_attempts=exceptions.max_retry + 1)
        self.registry = InstanceRegistry()
        scheduling = config.scheduler_config
        self.kv = (
            kv_routing(settings, self.metrics) if scheduling.scheduler_type == "kv_cache_affinity" else None
        )
        self.scheduler = Scheduler(
            scheduling.scheduler_type,
            affinity_block_size=scheduling.affinity_block_size,
            affinity_max_load_ratio=scheduling.affinity_max_load_ratio,
            admission_max_prefill_tokens=scheduling.admission_max_prefill_tokens,
            admission_max_decode_requests=scheduling.admission_max_decode_requests,
            stall_policy=StallPolicy(scheduling.stall_degraded_after, scheduling.stall_recovery_half_life),
            kv_locator=self.kv.locator if self.kv is not None else None,
            kv_weights=KvAffinityWeights(**scheduling.kv_affinity.model_dump()),
        )
        self.scheduler.health_changed = self.observer.health_changed
        self.registry.subscribe(self.scheduler.set_targets)
        self.circuit_keeper: CircuitKeeper | None = None
        self.circuits: CircuitSink | None = None
        if config.circuit_config.enable:
            if circuit_reporter is None:
                self.circuit_keeper = keep_circuits(config.circuit_config, self.registry)
                circuit_reporter = self.circuit_keeper
            self.circuits = circuit_reporter
        if self.kv is not None:
            self.registry.subscribe(self.kv.subscriber.set_targets)
        self.tracer = request_tracer(config.tracer_config)
        self.callbacks = CallbackRegistry()
        self.auth = ApiKeyVerifier(config.api_key_config) if config.api_key_config.enable_api_key else None
        rate = config.rate_limit_config
        self.rate = (
            TokenBucket(rate.max_requests, rate.window_size, shared) if rate.enable_rate_limit else None
        )
        self.in_flight = InFlightLimit(config.request_limit.max_requests, shared, worker_index)
        self.active: set[Dispatch] = set()
        self._models: frozenset[str] = frozenset()
        self._models_version = -1
        self._sweeper: asyncio.Task[None] | None = None
        self.loop: asyncio.AbstractEventLoop
        self.pool: UpstreamPool
        self.dispatch_context: DispatchContext

    async def start(self, callback_base_url: str) -> None:
        config = self.config
        timeouts = config.timeout_config
        self.loop = asyncio.get_running_loop()
        self.pool = UpstreamPool(
            connect_timeout=timeouts.connection_timeout,
            write_timeout=timeouts.write_timeout,
            idle_timeout=timeouts.engine_client_keepalive_expiry,
        )
        self.callbacks.base_url = callback_base_url
        limits = DispatchLimits(
            exceptions=config.exception_config,
            timeouts=timeouts,
            admission_queue_timeout=config.scheduler_config.admission_queue_timeout,
            retry_policy=self.retry_policy,
        )
        # what every request's dispatch uses of this process (the loop and the pool exist from here on)
        self.dispatch_context = DispatchContext(
            self.loop,
            self.scheduler,
            self.pool,
            self.observer,
            self.callbacks,
            limits,
            self.circuits,
            self.tracer,
        )
        self._sweeper = asyncio.create_task(self._sweep())
        if self.circuit_keeper is not None:
            self.circuit_keeper.start()
        if self.kv is not None:
            self.kv.start()

    async def stop(self) -> None:
        self.metrics.flush()
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        for dispatch in list(self.active):
            dispatch.expire("shutdown")
        self.pool.close()
        if self.circuit_keeper is not None:
            await self.circuit_keeper.stop()
        if self.kv is not None:
            await self.kv.close()
        if self.tracer is not None:
            self.tracer.shutdown()  # exports the spans still batched

    def models(self) -> frozenset[str]:
        if self._models_version != self.registry.version:
            self._models = frozenset(self.settings.served_models) | frozenset(self.registry.models())
            self._models_version = self.registry.version
        return self._models

    async def _sweep(self) -> None:
        """Ends requests whose client stopped reading (write_timeout) or that outlived infer_timeout.

        Engine waits carry their own deadlines; this covers waits on the client, without a timer per write.
        """
        write_timeout = self.config.timeout_config.write_timeout
        interval = min(MAX_SWEEP_INTERVAL, write_timeout / 4)
        while True:
            await asyncio.sleep(interval)
            self.metrics.flush()
            if self.kv is not None:
                for instance, tier, blocks in self.kv.held_blocks():
                    self.metrics.kv_events.held(instance, tier, blocks)
            if not self.active:
                continue
            now = time.perf_counter()
            loop_now = self.loop.time()
            for dispatch in list(self.active):
                kind = dispatch.expiry(now, loop_now, write_timeout)
                if kind is not None:
                    dispatch.expire(kind)


def request_tracer(config: TracerConfig) -> "RequestTracer | None":
    if not config.endpoint:
        return None
    from motor.coordinator.tracing import (
        RequestTracer,  # loads the OpenTelemetry SDK: only when tracing is on
    )

    return RequestTracer(config)


def keep_circuits(config: CircuitConfig, registry: InstanceRegistry) -> CircuitKeeper:
    """The breakers of the instances in `registry`, kept in this process: open circuits leave its routing."""
    keeper = CircuitKeeper(config, registry.snapshot, lambda view: registry.set_open_circuits(view.open))
    registry.subscribe(lambda _: keeper.instances_changed())
    return keeper


def kv_routing(settings: CoordinatorSettings, metrics: CoordinatorMetrics) -> KvRouting:
    spec = settings.kv_index
    if spec is None:
        raise ValueError(
            "scheduler_type kv_cache_affinity needs the engines' block hashing (the spec's kv_index)"
        )
    tokenizer = load_prompt_tokenizer(spec.engine_type, spec.model_path)
    return KvRouting.create(spec, tokenizer, pool_answered=metrics.pool_answered, feeds=metrics.kv_events)
