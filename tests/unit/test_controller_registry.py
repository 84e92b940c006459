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


def test_restored_instances_stay_initial_until_a_heartbeat_confirms_them() -> None:
    registry = InstanceRegistry(TIMEOUTS)
    registry.register(registration("healthy"), now=0)
    (instance,) = registry.active()
    restored = InstanceRegistry(TIMEOUTS)
    restored.restore(instance, "http://127.0.0.1:9", now=50)
    assert restored.active() == []  # not pushed as routable on the persisted word alone
    assert restored.expire(now=50 + TIMEOUTS.heartbeat + 1) == []
    (view,) = restored.views(now=59)
    assert (view.instance.status, view.registrations) == ("initial", 0)

    (confirmed,) = restored.heartbeat(Heartbeat(instance_id="decode-0", engine_state="healthy"), now=60)  # type: ignore[misc]
    assert (confirmed.before, confirmed.after) == ("initial", "active")
    assert event_for(confirmed).event == "add"  # type: ignore[union-attr]
    assert restored.active() == [instance]


def test_restored_instances_whose_node_manager_never_returns_expire() -> None:
    registry = InstanceRegistry(TIMEOUTS)
    registry.register(registration("healthy"), now=0)
    restored = InstanceRegistry(TIMEOUTS)
    restored.restore(registry.active()[0], "http://127.0.0.1:9", now=0)
    (expired,) = restored.expire(now=TIMEOUTS.expired + 0.1)
    assert (expired.before, expired.after) == ("initial", "deleted")
