"""Attempts until the client-facing leg produced output: retry on another instance with exponential backoff
(`retry_delay * 2**attempt`, at most `max_retry` retries, never past the request's infer_timeout).

Each attempt chooses its flow from the instance set of that moment, so an attempt after a decode instance
went away runs aggregated on prefill instances, and one that found no instance for a role waits for the
controller to register one.
"""

import asyncio
import logging
import time

from motor.coordinator.dispatch.profiles import choose_flow
from motor.coordinator.dispatch.request import Dispatch, EngineRejected, LegFailure, Opened

log = logging.getLogger(__name__)


async def open_with_retries(d: Dispatch) -> Opened:
    core = d.core
    config = core.config.exception_config
    attempt = 0
    while True:
        try:
            flow = choose_flow(core.profile, core.registry)
            return await flow(d)
        except EngineRejected:
            d.abandon("engine rejected the request")
            raise
        except LegFailure as failure:
            d.end_attempt(f"{failure.role} leg failed")
            if failure.target is not None:
                d.excluded[failure.role].add(failure.target.instance_id)
            now = d.loop.time()
            if now >= d.deadline:
                raise LegFailure(
                    failure.role,
                    failure.target,
                    "infer_timeout",
                    f"the request did not complete within infer_timeout ({config.infer_timeout:g} s); "
                    f"last error: {failure.message}",
                    status=504,
                    retryable=False,
                ) from None
            delay = config.retry_delay * (2**attempt)
            if not failure.retryable or attempt >= config.max_retry or now + delay >= d.deadline:
                if attempt:
                    failure.message = f"{failure.message} (gave up after {attempt + 1} attempts)"
                raise
            core.metrics.retries.labels(failure.role, failure.reason).inc()
            log.warning("request %s: %s; retrying in %.3g s", d.request_id, failure.message, delay)
            attempt += 1
            # A retry may land where a cancelled leg of this request is still being torn down; engines refuse
            # a request id they still hold, so later attempts carry their own.
            d.engine_rid = f"{d.request_id}-retry{attempt}".encode()
            if delay:
                started = time.perf_counter()
                await asyncio.sleep(delay)
                d.waited += time.perf_counter() - started
