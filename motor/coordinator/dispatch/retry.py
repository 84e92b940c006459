"""Attempts until the client-facing leg produced output: each failure is settled by the attempt
(`Attempt.fail`: the failure table, the retry guard, `max_retry`, backoff `retry_delay * 2**attempt`, never
past the request's infer_timeout); this loop only waits and starts the next one.

Each attempt chooses its flow from the instance set of that moment, so an attempt after a decode instance
went away runs aggregated on prefill instances, and one that found no instance for a role waits for the
controller to register one.
"""

import logging

from motor.coordinator.dispatch.attempt import Attempt
from motor.coordinator.dispatch.dispatch import Dispatch
from motor.coordinator.dispatch.failures import LegFailure
from motor.coordinator.dispatch.flows import choose_flow

log = logging.getLogger(__name__)


async def open_with_retries(d: Dispatch) -> Attempt:
    """The attempt whose client-facing leg has its first output (STREAMING); raises the final LegFailure."""
    core = d.core
    while True:
        attempt = d.new_attempt()
        try:
            await attempt.run(choose_flow(core.profile, core.registry))
            return attempt
        except LegFailure as failure:
            delay = attempt.fail(failure, core.retry_policy)
            settled = attempt.failure
            assert settled is not None
            if delay is None:
                raise settled from None
            log.warning("request %s: %s; retrying in %.3g s", d.label, settled.message, delay)
            if delay:
                await d.backoff(delay)
