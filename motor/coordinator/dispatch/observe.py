"""The metrics the dispatch transitions feed (names and labels as documented in the README's Metrics list).

| transition | metric |
|---|---|
| prefill leg SENT → DONE | `motor_coordinator_leg_seconds{leg="prefill"}` (time SENT) |
| attempt HANDOVER → STREAMING | `..._leg_seconds{leg="kv_wait"}` (prefill answered → decode's first output) |
| client-facing leg RECEIVING → DONE or FAILED | `{leg="decode"}` (PD: first output → end) or `{leg="aggregated"}` (sent → end) |
| attempt → RETRYING | `motor_coordinator_retries_total{role,reason}` (the failure's role and reason) |
| an open connection closed by the coordinator | `motor_coordinator_cancelled_legs_total{reason}` |
"""

from typing import TYPE_CHECKING

from motor.coordinator.dispatch.states import (
    HANDOVER,
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

if TYPE_CHECKING:
    from motor.coordinator.dispatch.attempt import Attempt, Leg


class MetricsObserver:
    __slots__ = ("metrics",)

    def __init__(self, metrics: CoordinatorMetrics) -> None:
        self.metrics = metrics

    def phase_changed(self, attempt: "Attempt", old: Phase, new: Phase, seconds: float) -> None:
        if new is STREAMING:
            if old is HANDOVER:
                self.metrics.observe_leg("kv_wait", seconds)
        elif new is RETRYING:
            failure = attempt.failure
            assert failure is not None
            self.metrics.retries.labels(failure.role, failure.reason).inc()

    def leg_changed(self, leg: "Leg", old: LegState, new: LegState, seconds: float) -> None:
        if new is LEG_DONE or new is LEG_FAILED:
            if leg.client:
                if old is RECEIVING:
                    if leg.attempt.pd:
                        self.metrics.observe_leg("decode", seconds)
                    else:  # sent → end: the time receiving plus the time before the first output
                        self.metrics.observe_leg("aggregated", seconds + leg.since - leg.sent_at)
            elif old is SENT and new is LEG_DONE:
                self.metrics.observe_leg("prefill", seconds)

    def leg_cancelled(self, leg: "Leg", reason: str) -> None:
        self.metrics.cancelled_legs.labels(reason).inc()
