"""`GET /metrics` of a node manager: its engine's state and restarts, read at scrape time.

`motor_node_manager_engine_state{state}` is 1 for the engine's current state and 0 for the others;
`motor_node_manager_engine_restarts_total` counts restarts since the node manager started;
`motor_node_manager_registered` is 1 once the controller acknowledged the registration. The instance and role
come from the scrape target's labels (motor.deploy.prometheus).
"""

from collections.abc import Callable, Iterable
from typing import get_args

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from motor.protocol.controller import EngineState
from motor.protocol.node_manager import NodeManagerStatus

ENGINE_STATES: tuple[str, ...] = get_args(EngineState)


class NodeManagerCollector(Collector):
    def __init__(self, status: Callable[[], NodeManagerStatus]) -> None:
        self._status = status

    def collect(self) -> Iterable[Metric]:
        status = self._status()
        state = GaugeMetricFamily(
            "motor_node_manager_engine_state", "1 for the engine's current state", labels=["state"]
        )
        for name in ENGINE_STATES:
            state.add_metric([name], 1 if status.engine_state == name else 0)
        yield state
        yield CounterMetricFamily(
            "motor_node_manager_engine_restarts",
            "Engine restarts since the node manager started",
            value=status.engine_restarts,
        )
        yield GaugeMetricFamily(
            "motor_node_manager_registered",
            "1 once the controller acknowledged this node manager's registration",
            value=int(status.registered),
        )


def node_manager_registry(status: Callable[[], NodeManagerStatus]) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeManagerCollector(status))
    return registry
