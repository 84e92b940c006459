"""The plan gives prefill/union engines a KV event publisher when the coordinator routes on KV events."""

import dataclasses
import json

from motor.deploy.plan import build_plan
from motor.engine.sim.cli import parse_config
from tests.unit.test_plan import sim_topology


def _kv_topology(deploy_mode: str = "local", engine_type: str = "vllm"):
    topology = sim_topology(deploy_mode)
    roles = {
        role: dataclasses.replace(
            spec, engine_type=engine_type, engine_config={**spec.engine_config, "model": "/models/tiny"}
        )
        for role, spec in topology.roles.items()
    }
    topology = dataclasses.replace(topology, roles=roles)
    user = topology.user
    coordinator = user.motor_coordinator_config
    scheduler = coordinator.scheduler_config.model_copy(update={"scheduler_type": "kv_cache_affinity"})
    coordinator = coordinator.model_copy(update={"scheduler_config": scheduler})
    return dataclasses.replace(
        topology, user=user.model_copy(update={"motor_coordinator_config": coordinator})
    )


def _engines(plan):
    return {c.name: c for c in plan.components if c.kind == "node_manager"}


def test_local_engines_publish_on_ipc_in_their_run_dir() -> None:
    plan = build_plan(_kv_topology(), config_dir="/c", run_dir="/r", python="/venv/bin/python")
    for name, component in _engines(plan).items():
        engine = component.spec.engine
        if component.role == "decode":
            assert engine.kv_events is None and "--kv-events-config" not in engine.argv
            continue
        config = json.loads(engine.argv[engine.argv.index("--kv-events-config") + 1])
        assert config["endpoint"] == f"ipc:///r/{name}/kv.ev" == engine.kv_events
        assert config["replay_endpoint"] == f"ipc:///r/{name}/kv.rp" == engine.kv_events_replay
        assert engine.argv[engine.argv.index("--prefix-caching-hash-algo") + 1] == "sha256"


def test_kubernetes_engines_bind_tcp_with_container_ports() -> None:
    plan = build_plan(_kv_topology("infer_service_set"), target="kubernetes")
    publishers = [c for c in _engines(plan).values() if c.role != "decode"]
    assert publishers
    for component in publishers:
        engine = component.spec.engine
        config = json.loads(engine.argv[engine.argv.index("--kv-events-config") + 1])
        assert config["endpoint"] == "tcp://*:5557" and config["replay_endpoint"] == "tcp://*:5558"
        assert engine.kv_events == "tcp://{advertise_host}:5557"
        assert component.ports["kv-events"] == 5557 and component.ports["kv-replay"] == 5558


def test_simulated_engines_publish_too_and_their_command_line_parses() -> None:
    plan = build_plan(
        _kv_topology(engine_type="sim"), config_dir="/c", run_dir="/r", python="/venv/bin/python"
    )
    publishers = [c for c in _engines(plan).values() if c.role != "decode"]
    assert publishers
    for component in publishers:
        engine = component.spec.engine
        sim_argv = engine.argv[engine.argv.index("motor.engine.sim") + 1 :]
        config = parse_config(sim_argv, environ={"PYTHONHASHSEED": "7"})
        assert config.kv_events is not None and config.kv_events.publishes
        assert config.kv_events.endpoint == engine.kv_events
        assert config.kv_events.replay_endpoint == engine.kv_events_replay
        assert config.kv_events.topic == "kv-events"
        assert (config.prefix_caching_hash_algo, config.hash_seed) == ("sha256", "7")


def test_a_run_dir_too_long_for_a_unix_socket_moves_the_sockets_to_short_distinct_paths() -> None:
    run_dir = "/tmp/" + "deep/" * 20
    plan = build_plan(_kv_topology(), config_dir="/c", run_dir=run_dir, python="/venv/bin/python")
    endpoints = [
        address
        for component in _engines(plan).values()
        if component.role != "decode"
        for address in (component.spec.engine.kv_events, component.spec.engine.kv_events_replay)
    ]
    assert endpoints and len(set(endpoints)) == len(endpoints)
    for address in endpoints:
        assert address.startswith("ipc:///tmp/motor-kv-") and len(address.removeprefix("ipc://")) <= 107


def _coordinator_kv_index(topology):
    plan = build_plan(topology, config_dir="/c", run_dir="/r", python="/venv/bin/python")
    return next(c for c in plan.components if c.kind == "coordinator").spec.kv_index


def test_the_coordinator_asks_the_pool_with_the_keys_its_engines_write() -> None:
    sim = _coordinator_kv_index(_kv_topology(engine_type="sim")).pool
    assert (sim.key_scheme, sim.model) == ("motor-sim", "sim")  # its served_model_name
    assert sim.store_config["global_segment_size"] == 0 and sim.store_config["master_server_address"]

    vllm = _kv_topology()
    roles = {
        role: dataclasses.replace(
            spec,
            engine_config={
                **spec.engine_config,
                "kv_transfer_config": {
                    "kv_connector": "MultiConnector",
                    "kv_connector_extra_config": {
                        "connectors": [
                            {"kv_connector": "MooncakeConnectorV1"},
                            {"kv_connector": "MooncakeStoreConnector"},
                        ]
                    },
                },
            },
        )
        for role, spec in vllm.roles.items()
    }
    pool = _coordinator_kv_index(dataclasses.replace(vllm, roles=roles)).pool
    assert (pool.key_scheme, pool.model, pool.key_tp_ranks) == ("vllm-mooncake-store", "/models/tiny", 1)

    roles = {
        role: dataclasses.replace(
            spec,
            engine_config={
                **spec.engine_config,
                "kv_transfer_config": {"kv_connector": "MooncakeConnectorV1"},
            },
        )
        for role, spec in vllm.roles.items()
    }
    assert (
        _coordinator_kv_index(dataclasses.replace(vllm, roles=roles)).pool is None
    )  # nothing in the pool to ask
