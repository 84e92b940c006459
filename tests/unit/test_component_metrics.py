"""/metrics of the controller and the node manager: their state as Prometheus series, read at scrape time."""

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from motor.controller.metrics import controller_registry
from motor.coordinator.metrics import InfoCollector
from motor.node_manager.metrics import node_manager_registry
from motor.protocol.controller import ControllerState, CoordinatorLinkView, InstanceView
from motor.protocol.instances import Endpoint, Instance
from motor.protocol.node_manager import NodeManagerStatus


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def view(instance_id: str, role: str, status: str, restarts: int = 0) -> InstanceView:
    return InstanceView(
        instance=Instance(
            id=instance_id,
            role=role,  # type: ignore[arg-type]
            engine_id=instance_id,
            model_name="m",
            endpoints=[Endpoint(host="127.0.0.1", port=9)],
            status=status,  # type: ignore[arg-type]
        ),
        node_manager_url="http://127.0.0.1:9",
        engine_state="healthy",
        engine_restarts=restarts,
        registrations=1,
        seconds_since_heartbeat=0.5,
    )


def test_controller_counts_instances_per_role_and_status_with_zeros() -> None:
    state = ControllerState(
        instances=[view("prefill-0", "prefill", "active"), view("prefill-1", "prefill", "inactive", 2)],
        coordinators=[CoordinatorLinkView(url="http://c", acknowledged_events=3, pending=True)],
    )
    found = samples(controller_registry(lambda: state))
    for status, count in (("initial", 0), ("active", 1), ("inactive", 1)):
        assert found["motor_controller_instances", (("role", "prefill"), ("status", status))] == count
    assert not any(
        labels and dict(labels).get("role") == "decode" for _, labels in found
    )  # no decode configured
    assert found["motor_controller_engine_restarts", (("instance_id", "prefill-1"), ("role", "prefill"))] == 2
    assert found["motor_controller_pending_pushes", ()] == 1


def test_node_manager_reports_its_engine_state_one_hot_and_restarts() -> None:
    status = NodeManagerStatus(
        instance_id="decode-0", role="decode", engine_state="unhealthy", engine_restarts=3, registered=True
    )
    found = samples(node_manager_registry(lambda: status))
    states = {
        dict(labels)["state"]: value for (name, labels), value in found.items() if name.endswith("state")
    }
    assert states == {"starting": 0, "healthy": 0, "unhealthy": 1, "crash_looping": 0, "stopped": 0}
    assert found["motor_node_manager_engine_restarts_total", ()] == 3
    assert found["motor_node_manager_registered", ()] == 1


def test_coordinator_info_names_the_profile() -> None:
    registry = CollectorRegistry()
    registry.register(InfoCollector("prefill_first", "0.1.0"))
    assert samples(registry) == {
        ("motor_coordinator_info", (("profile", "prefill_first"), ("version", "0.1.0"))): 1
    }
