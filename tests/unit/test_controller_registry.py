"""The controller's pure parts: the lifecycle table, the registry's changes and which of them are pushed."""

import pytest

from motor.controller.lifecycle import Signal, next_status
from motor.controller.pusher import event_for
from motor.controller.registry import InstanceRegistry, Timeouts
from motor.protocol.controller import Heartbeat, Registration
from motor.protocol.instances import Endpoint

TIMEOUTS = Timeouts(heartbeat=10, expired=100)


def registration(state: str = "starting", port: int = 20001) -> Registration:
    return Registration(
        instance_id="decode-0",
        role="decode",
        engine_id="decode-0",
        model_name="m",
        node_manager_url="http://127.0.0.1:9",
        endpoints=[Endpoint(host="127.0.0.1", port=port, status_port=port + 1)],
        engine_state=state,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("status", "signal", "after"),
    [
        ("initial", Signal.NORMAL, "active"),
        ("initial", Signal.INIT, "initial"),
        ("initial", Signal.ABNORMAL, "inactive"),
        ("initial", Signal.HEARTBEAT_TIMEOUT, "initial"),
        ("initial", Signal.EXPIRED, "deleted"),
        ("active", Signal.NORMAL, "active"),
        ("active", Signal.INIT, "inactive"),
        ("active", Signal.ABNORMAL, "inactive"),
        ("active", Signal.HEARTBEAT_TIMEOUT, "inactive"),
        ("active", Signal.EXPIRED, "active"),
        ("inactive", Signal.NORMAL, "active"),
        ("inactive", Signal.INIT, "inactive"),
        ("inactive", Signal.ABNORMAL, "inactive"),
        ("inactive", Signal.EXPIRED, "deleted"),
    ],
)
def test_lifecycle_table(status: str, signal: Signal, after: str) -> None:
    assert next_status(status, signal) == after  # type: ignore[arg-type]


def test_registry_reports_each_change_and_pushes_only_routing_changes() -> None:
    registry = InstanceRegistry(TIMEOUTS)
    created = registry.register(registration(), now=0)
    assert [(c.before, c.after) for c in created] == [(None, "initial")]
    assert [event_for(c) for c in created] == [None]

    (activated,) = registry.heartbeat(Heartbeat(instance_id="decode-0", engine_state="healthy"), now=1)  # type: ignore[misc]
    assert event_for(activated).event == "add"  # type: ignore[union-attr]
    assert registry.heartbeat(Heartbeat(instance_id="decode-0", engine_state="healthy"), now=2) == []

    # re-registration of an active instance with a new endpoint: pushed again as add
    (moved,) = registry.register(registration("healthy", port=20011), now=3)
    assert moved.refreshed and event_for(moved).instances[0].endpoints[0].port == 20011  # type: ignore[union-attr]

    assert registry.expire(now=3 + TIMEOUTS.heartbeat) == []
    (silent,) = registry.expire(now=3 + TIMEOUTS.heartbeat + 0.1)
    assert (silent.before, silent.after) == ("active", "inactive")
    assert event_for(silent).event == "del"  # type: ignore[union-attr]

    (expired,) = registry.expire(now=3 + TIMEOUTS.expired + 0.1)
    assert (expired.before, expired.after) == ("inactive", "deleted") and event_for(expired) is None
    assert registry.get("decode-0") is None
    assert registry.heartbeat(Heartbeat(instance_id="decode-0", engine_state="healthy"), now=200) is None


def test_restored_instances_get_a_full_heartbeat_timeout() -> None:
    registry = InstanceRegistry(TIMEOUTS)
    registry.register(registration("healthy"), now=0)
    (instance,) = registry.active()
    restored = InstanceRegistry(TIMEOUTS)
    restored.restore(instance, "http://127.0.0.1:9", now=50)
    assert restored.expire(now=59) == []
    assert restored.active() == [instance]
    (view,) = restored.views(now=59)
    assert view.registrations == 0
