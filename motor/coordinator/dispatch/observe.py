"""The metrics the dispatch transitions feed (names and labels as documented in the README's Metrics list).

| transition | metric |
|---|---|
| prefill leg SENT → DONE | `motor_coordinator_leg_seconds{leg="prefill"}` (time SENT) |
| encode leg SENT → DONE | `..._leg_seconds{leg="encode"}` (time SENT) |
| encode leg → DONE, FAILED or ABORTED | `motor_coordinator_encode_legs_total{outcome}` (done, failed, aborted) |
| attempt HANDOVER → STREAMING | `..._leg_seconds{leg="kv_wait"}` (prefill answered → decode's first output) |
| client-facing leg RECEIVING → DONE or FAILED | `{leg="decode"}` (PD: first output → end) or `{leg="aggregated"}` (sent → end) |
| attempt → RETRYING | `motor_coordinator_retries_total{role,reason}` (the failure's role and reason) |
| an open connection closed by the coordinator | `motor_coordinator_cancelled_legs_total{reason}` |
| prefill leg missed its own deadline | `motor_coordinator_prefill_stalls_total{instance}` |
| an instance became degraded / recovered | `motor_coordinator_instance_degraded{instance,role}` 1 / 0 |
| kv_cache_affinity: a prefill leg answered | `motor_coordinator_kv_predictions_total{outcome}` (expected cached vs reported) |

At DEBUG every transition is also logged with the time spent in the state it leaves, so one slow request's
timeline (which leg, which instance, which wait) can be read from the coordinator's log. The level is read once
per request, when it arrives (`logs_transitions`), not on every transition.
"""

import logging
from typing import TYPE_CHECKING

from motor.coordinator.dispatch.states import (
    HANDOVER,
    LEG_ABORTED,
    LEG_DONE,
    LEG_FAILED,
    RECEIVING,
    RETRYING,
    SENT,
    STREAMING,
    LegState,
    Phase,
)
from motor.coordinator.metrics import CoordinatorMetrics
from motor.coordinator.scheduling.kv_matches import KvPrediction
from motor.coordinator.scheduling.load import EndpointLoad

if TYPE_CHECKING:
    # import cycle: type hints only — the attempts and legs it observes
    from motor.coordinator.dispatch.attempt import Attempt, Leg

log = logging.getLogger(__name__)

_ENCODE_OUTCOMES = {LEG_DONE: "done", LEG_FAILED: "failed", LEG_ABORTED: "aborted"}


class MetricsObserver:
    __slots__ = ("metrics",)

    def __init__(self, metrics: CoordinatorMetrics) -> None:
        self.metrics = metrics

    def logs_transitions(self) -> bool:
        """Whether the transitions of a request that arrives now are logged (DEBUG on this module's logger)."""
        return log.isEnabledFor(logging.DEBUG)

    def phase_changed(self, attempt: "Attempt", old: Phase, new: Phase, seconds: float) -> None:
        if attempt.dispatch.log_transitions:
            log.debug(
                "request %s attempt %d: %s → %s after %.3f s",
                attempt.dispatch.label,
                attempt.number,
                old.name,
                new.name,
                seconds,
            )
        if new is STREAMING:
            if old is HANDOVER:
                self.metrics.observe_leg("kv_wait", seconds)
        elif new is RETRYING:
            failure = attempt.failure
            assert failure is not None
            self.metrics.retries.labels(failure.role, failure.reason).inc()

    def kv_predicted(self, leg: "Leg", prediction: KvPrediction, cached: int) -> None:
        """The prefill engine kv_cache_affinity chose answered: what it expected against what the engine found."""
        miss = prediction.tokens - cached
        if miss == 0:
            outcome = "exact"
        elif abs(miss) <= prediction.block_size:
            outcome = "within_block"
        else:
            outcome = "over" if miss > 0 else "under"
        self.metrics.kv_predictions.labels(outcome).inc()
        if log.isEnabledFor(logging.DEBUG):
            blocks = prediction.blocks
            log.debug(
                "request %s attempt %d: kv_cache_affinity expected %d cached prompt tokens on %s (blocks: %d own, "
                "%d CPU or pool, %d disk), the engine reported %d",
                leg.attempt.dispatch.label,
                leg.attempt.number,
                prediction.tokens,
                leg.target.instance_id,
                blocks.npu,
                blocks.cpu,
                blocks.disk,
                cached,
            )

    def leg_changed(self, leg: "Leg", old: LegState, new: LegState, seconds: float) -> None:
        if leg.attempt.dispatch.log_transitions:
            log.debug(
                "request %s attempt %d: %s leg on %s: %s → %s after %.3f s",
                leg.attempt.dispatch.label,
                leg.attempt.number,
                leg.role,
                leg.target.instance_id,
                old.name,
                new.name,
                seconds,
            )
        if leg.role == "encode" and new in _ENCODE_OUTCOMES:
            self.metrics.encode_legs.labels(_ENCODE_OUTCOMES[new]).inc()
        if new is LEG_DONE or new is LEG_FAILED:
            if leg.client:
                if old is RECEIVING:
                    if leg.attempt.pd:
                        self.metrics.observe_leg("decode", seconds)
                    else:  # sent → end: the time receiving plus the time before the first output
                        self.metrics.observe_leg("aggregated", seconds + leg.since - leg.sent_at)
            elif old is SENT and new is LEG_DONE:
                self.metrics.observe_leg(leg.role, seconds)  # "prefill" or "encode"

    def leg_cancelled(self, leg: "Leg", reason: str) -> None:
        self.metrics.cancelled_legs.labels(reason).inc()

    def prefill_stalled(self, leg: "Leg") -> None:
        self.metrics.prefill_stalls.labels(leg.target.instance_id).inc()

    def health_changed(self, endpoint: EndpointLoad, degraded: bool) -> None:
        self.metrics.instance_degraded.labels(endpoint.instance_id, endpoint.role).set(1 if degraded else 0)
        if degraded:
            log.warning(
                "%s instance %s is degraded after %d prefill stalls: it gets legs only when no other instance "
                "can take them, until it recovers",
                endpoint.role,
                endpoint.instance_id,
                endpoint.stalls.stalls,
            )
        else:
            log.info("%s instance %s recovered from its prefill stalls", endpoint.role, endpoint.instance_id)
