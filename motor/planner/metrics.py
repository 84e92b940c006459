"""`GET /metrics` of the planner, read from its state at scrape time.

`motor_planner_instances{role,state}` (deployed: what the job runs; active: routable; target: what the last
decision wants), `motor_planner_needed_instances{role}` (what each role needs, fractional),
`motor_planner_figure{figure}` (what the last decision read: arrivals/s, tokens per request, capacities),
`motor_planner_decisions_total{kind}` (hold, scale, convert), `motor_planner_scale_steps_total{outcome}`,
`motor_planner_scale_step_seconds` (the sum and count of the steps carried out), `motor_planner_applying`
(1 while a change is carried out) and `motor_planner_last_decision_info{kind,reason}` (= 1).
"""

from collections.abc import Iterable

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from motor.planner.decide import DECISION_KINDS
from motor.planner.service import Planner


class PlannerCollector(Collector):
    def __init__(self, planner: Planner) -> None:
        self._planner = planner

    def collect(self) -> Iterable[Metric]:
        planner = self._planner
        status = planner.status()
        instances = GaugeMetricFamily(
            "motor_planner_instances",
            "Instances per role the job runs (deployed), of those routable (active), and the last decision's target",
            labels=["role", "state"],
        )
        for state, counts in (
            ("deployed", status.counts),
            ("active", status.active),
            ("target", status.targets),
        ):
            for role, count in counts.items():
                instances.add_metric([role, state], count)
        yield instances
        need = GaugeMetricFamily(
            "motor_planner_needed_instances",
            "Instances each role needs, as the last decision worked out",
            labels=["role"],
        )
        for role, value in (status.need or {}).items():
            need.add_metric([role], value)
        yield need
        figure = GaugeMetricFamily(
            "motor_planner_figure",
            "What the last decision read (rates per second, tokens, capacities)",
            labels=["figure"],
        )
        for name, value in status.figures.items():
            if value is not None:
                figure.add_metric([name], value)
        yield figure
        decisions = CounterMetricFamily("motor_planner_decisions", "Decisions by kind", labels=["kind"])
        for kind in DECISION_KINDS:
            decisions.add_metric([kind], planner.decisions_by_kind[kind])
        yield decisions
        steps = CounterMetricFamily(
            "motor_planner_scale_steps", "Scale steps carried out, by outcome", labels=["outcome"]
        )
        for outcome in ("done", "failed"):
            steps.add_metric([outcome], planner.steps_by_outcome[outcome])
        yield steps
        yield SummaryMetricFamily(
            "motor_planner_scale_step_seconds",
            "Seconds each scale step took, until the job was ready again",
            count_value=len(planner.step_seconds),
            sum_value=sum(planner.step_seconds),
        )
        yield GaugeMetricFamily(
            "motor_planner_applying", "1 while a change is carried out", value=int(bool(status.applying))
        )
        if planner.last is not None:
            info = InfoMetricFamily("motor_planner_last_decision", "The last decision and its reason")
            info.add_metric([], {"kind": planner.last.kind, "reason": planner.last.reason})
            yield info


def planner_registry(planner: Planner) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PlannerCollector(planner))
    return registry
