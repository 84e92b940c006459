"""The KV event addresses an engine publishes on travel node manager spec → Endpoint → coordinator Target."""

from motor.config.kv_events import kv_events_enabled
from motor.coordinator.registry import InstanceRegistry
from motor.protocol.instances import Endpoint, Instance, InstanceEvent


def _instance(events: str | None, replay: str | None) -> Instance:
    endpoint = Endpoint(host="127.0.0.1", port=9000, kv_events=events, kv_events_replay=replay)
    return Instance(
        id="prefill-0", role="prefill", engine_id="prefill-0", model_name="m", endpoints=[endpoint]
    )


def test_endpoint_round_trips_kv_event_addresses() -> None:
    instance = _instance("ipc:///run/p0.ev", "ipc:///run/p0.rp")
    again = Instance.model_validate_json(instance.model_dump_json())
    assert again.endpoints[0].kv_events == "ipc:///run/p0.ev"
    assert again.endpoints[0].kv_events_replay == "ipc:///run/p0.rp"


def test_target_takes_and_updates_kv_event_addresses() -> None:
    registry = InstanceRegistry()
    registry.apply(
        InstanceEvent(event="set", instances=[_instance("tcp://10.0.0.5:5557", "tcp://10.0.0.5:5558")])
    )
    target = registry.targets("prefill")[0]
    assert (target.kv_events, target.kv_events_replay) == ("tcp://10.0.0.5:5557", "tcp://10.0.0.5:5558")
    registry.apply(InstanceEvent(event="set", instances=[_instance(None, None)]))
    same = registry.targets("prefill")[0]
    assert same is target and same.kv_events is None and same.kv_events_replay is None


def test_kv_events_enabled_reads_the_raw_scheduler_type() -> None:
    raw = {"motor_coordinator_config": {"scheduler_config": {"scheduler_type": "kv_cache_affinity"}}}
    assert kv_events_enabled(raw)
    assert not kv_events_enabled(
        {"motor_coordinator_config": {"scheduler_config": {"scheduler_type": "load_balance"}}}
    )
    assert not kv_events_enabled({})


def test_engine_options_get_the_publisher_and_keep_the_operators_topic() -> None:
    from motor.deploy.engines.kv_events import local_placement, pod_placement, with_kv_events

    local = with_kv_events({"model": "m"}, local_placement("/tmp/j/prefill-0"))
    assert local["kv-events-config"] == {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": "ipc:///tmp/j/prefill-0/kv.ev",
        "replay_endpoint": "ipc:///tmp/j/prefill-0/kv.rp",
        "topic": "kv-events",
    }
    assert local["prefix-caching-hash-algo"] == "sha256"
    pod = pod_placement("{advertise_host}", 5557, 5558)
    assert (pod.endpoint, pod.connect) == ("tcp://*:5557", "tcp://{advertise_host}:5557")
    own = with_kv_events({"kv-events-config": {"topic": "mine"}, "prefix-caching-hash-algo": "xxhash"}, pod)
    assert own["kv-events-config"]["topic"] == "mine" and own["prefix-caching-hash-algo"] == "xxhash"
