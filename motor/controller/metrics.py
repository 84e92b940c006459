"""`GET /metrics` of the controller: the instance registry as Prometheus gauges, read at scrape time.

`motor_controller_instances{role,status}` counts instances per role and lifecycle status (every status of a
role that has instances, zeros included, so a dashboard shows `inactive 0` rather than nothing);
`motor_controller_engine_restarts{instance_id,role}` is each engine's restart count as its node manager reports
it; `motor_controller_pending_pushes` counts coordinators with an instance change not acknowledged yet.
"""

from collections import Counter
from collections.abc import Callable, Iterable
from typing import get_args

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from motor.protocol.controller import ControllerState
from motor.protocol.instances import InstanceStatus

STATUSES = [status for status in get_args(InstanceStatus) if status != "deleted"]


class ControllerCollector(Collector):
    def __init__(self, state: Callable[[], ControllerState]) -> None:
        self._state = state

    def collect(self) -> Iterable[GaugeMetricFamily]:
        state = self._state()
        instances = GaugeMetricFamily(
            "motor_controller_instances", "Registered instances by role and status", labels=["role", "status"]
        )
        counts = Counter((view.instance.role, view.instance.status) for view in state.instances)
        for role in sorted({role for role, _ in counts}):
            for status in STATUSES:
                instances.add_metric([role, status], counts[(role, status)])
        yield instances
        restarts = GaugeMetricFamily(
            "motor_controller_engine_restarts",
            "Engine restarts per instance, as reported by its node manager",
            labels=["instance_id", "role"],
        )
        for view in state.instances:
            restarts.add_metric([view.instance.id, view.instance.role], view.engine_restarts)
        yield restarts
        yield GaugeMetricFamily(
            "motor_controller_pending_pushes",
            "Coordinators with an instance change not acknowledged yet",
            value=sum(link.pending for link in state.coordinators),
        )


def controller_registry(state: Callable[[], ControllerState]) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ControllerCollector(state))
    return registry
