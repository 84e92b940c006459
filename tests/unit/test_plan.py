"""Plan: config -> components for local and Kubernetes targets."""

import json
from pathlib import Path

import pytest

from motor.config import Topology, load_config, load_documents
from motor.deploy.plan import POD_IP_REF, Plan, build_plan, required_roles, service_host
from motor.kv.connectors import DispatchProfile
from motor.protocol.specs import (
    HOST_PLACEHOLDER,
    ControllerSpec,
    CoordinatorSpec,
    NodeManagerSpec,
    load_spec,
)

SEED = Path(__file__).resolve().parents[2] / "examples" / "infer_engines" / "vllm"


def sim_topology(deploy_mode: str = "local", pool: bool = True, **deploy: object) -> Topology:
    engine = {
        "engine_type": "sim",
        "engine_config": {
            "served_model_name": "sim",
            "kv_transfer_config": {"kv_connector": "MooncakeConnectorV1"},
        },
    }
    user: dict[str, object] = {
        "version": "v2.0",
        "motor_deploy_config": {
            "p_instances_num": 2,
            "d_instances_num": 1,
            "deploy_mode": deploy_mode,
            "hardware_type": "cpu",
            "job_id": "simjob",
            "image_name": "motor:test",
            **deploy,
        },
        "motor_engine_prefill_config": engine,
        "motor_engine_decode_config": engine,
    }
    if pool:
        user["kv_cache_pool_config"] = {"protocol": "tcp"}
    env = {
        "version": "2.0.0",
        "motor_common_env": {"COMMON": "1"},
        "motor_controller_env": {"ONLY_CTRL": "x"},
    }
    return load_documents(user, env)


def test_local_plan_components_in_start_order() -> None:
    plan = build_plan(
        sim_topology(), config_dir="/run/job/config", run_dir="/run/job", python="/venv/bin/python"
    )
    assert plan.target == "local"
    assert [c.name for c in plan.components] == [
        "kv-pool",
        "controller",
        "coordinator",
        "prefill-0",
        "prefill-1",
        "decode-0",
    ]
    assert [c.kind for c in plan.node_managers] == ["node_manager"] * 3
    assert plan.coordinator_url == "http://127.0.0.1:1025"
    assert plan.user_config_path == "/run/job/config/user_config.json"


def test_local_node_managers_use_shifted_ports_and_entry_point() -> None:
    plan = build_plan(sim_topology(), config_dir="/c", run_dir="/r", python="/venv/bin/python")
    p1 = plan.component("prefill-1")
    assert (p1.role, p1.index) == ("prefill", 1)
    assert p1.ports == {"nm": 1031, "engine": 10002, "engine-status": 10003}
    assert plan.component("decode-0").ports["nm"] == 1032
    assert p1.argv == ("/venv/bin/python", "-m", "motor.node_manager", "--spec", "/c/prefill-1.spec.json")
    assert p1.probe_url("readiness", "127.0.0.1") == "http://127.0.0.1:1031/readiness"
    assert p1.env["MOTOR_RUN_DIR"] == "/r/prefill-1"
    spec = p1.spec
    assert isinstance(spec, NodeManagerSpec)
    assert (spec.instance_id, spec.role, spec.port, spec.run_dir) == (
        "prefill-1",
        "prefill",
        1031,
        "/r/prefill-1",
    )
    assert (spec.engine.port, spec.engine.status_port) == (10002, 10003)
    assert spec.engine.argv[:3] == ["/venv/bin/python", "-m", "motor.engine.server"]
    assert spec.engine.log_path == "/r/prefill-1/engine.log"


def test_every_motor_component_starts_from_its_spec_file(tmp_path: Path) -> None:
    plan = build_plan(sim_topology(), config_dir=str(tmp_path), run_dir="/r", python="/venv/bin/python")
    motor_components = [c for c in plan.components if c.spec is not None]
    assert sorted(plan.files) == sorted(f"{c.name}.spec.json" for c in motor_components)
    for component in motor_components:
        path = tmp_path / f"{component.name}.spec.json"
        path.write_text(plan.files[path.name])
        assert component.argv[-2:] == ("--spec", str(path))
        assert load_spec(path, type(component.spec)) == component.spec
    assert plan.component("kv-pool").spec is None


def test_specs_carry_credentials_by_reference_only() -> None:
    """The controller and the coordinator name the token; a node manager names only its instance's credential."""
    plan = build_plan(sim_topology(), config_dir="/c")
    for component in plan.components:
        if component.spec is None:
            continue
        text = plan.files[f"{component.name}.spec.json"]
        if component.kind == "node_manager":
            assert "MOTOR_CONTROLLER_TOKEN" not in text
            variable = f"MOTOR_INSTANCE_CREDENTIAL_{component.name.upper().replace('-', '_')}"
            assert f'"credential": {{\n    "env": "{variable}"\n  }}' in text
        else:
            assert '"env": "MOTOR_CONTROLLER_TOKEN"' in text
    assert all("MOTOR_CONTROLLER_TOKEN" not in c.env for c in plan.components)


def test_local_addresses_and_pool() -> None:
    plan = build_plan(sim_topology(), config_dir="/c", run_dir="/r", python="/venv/bin/python")
    nm = plan.component("decode-0")
    assert nm.env["MOTOR_ADVERTISE_HOST"] == "127.0.0.1"
    assert nm.env["PYTHONHASHSEED"] == "0"
    spec = nm.spec
    assert isinstance(spec, NodeManagerSpec)
    assert spec.controller_url == "http://127.0.0.1:1027"
    store_path = spec.engine.env["MOONCAKE_CONFIG_PATH"]
    assert store_path == "/r/decode-0/decode-0.mooncake.json"
    store = json.loads(spec.engine.files[store_path])
    assert store["master_server_address"] == "127.0.0.1:50088"
    assert store["protocol"] == "tcp"
    controller = plan.component("controller").spec
    assert isinstance(controller, ControllerSpec)
    assert controller.coordinator_urls == ["http://127.0.0.1:1026"]
    pool = plan.component("kv-pool")
    assert pool.argv[0] == "/venv/bin/mooncake_master"
    assert "--rpc_port=50088" in pool.argv and "--rpc_address=127.0.0.1" in pool.argv
    assert pool.probe_url("liveness", "h") == "http://h:9003/health"


def test_env_sections_reach_their_components_only() -> None:
    plan = build_plan(sim_topology(), config_dir="/c")
    assert plan.component("controller").env["ONLY_CTRL"] == "x"
    assert "ONLY_CTRL" not in plan.component("coordinator").env
    assert all(c.env["COMMON"] == "1" for c in plan.components)


def test_no_pool_no_pool_component() -> None:
    plan = build_plan(sim_topology(pool=False), config_dir="/c")
    assert [c.kind for c in plan.components][:2] == ["controller", "coordinator"]
    for component in plan.node_managers:
        assert isinstance(component.spec, NodeManagerSpec)
        assert "MOONCAKE_CONFIG_PATH" not in component.spec.engine.env
        assert component.spec.engine.files == {}


def test_local_plan_needs_config_dir() -> None:
    with pytest.raises(ValueError, match="config_dir"):
        build_plan(sim_topology())


def kubernetes_plan() -> Plan:
    return build_plan(load_config(SEED / "user_config.json", SEED / "env.json"))


def test_kubernetes_plan_uses_services_and_pod_ip() -> None:
    plan = kubernetes_plan()
    assert plan.target == "kubernetes"
    assert plan.config_dir == "/etc/motor"
    prefill = plan.component("prefill-0")
    assert prefill.env["MOTOR_ADVERTISE_HOST"] == POD_IP_REF
    spec = prefill.spec
    assert isinstance(spec, NodeManagerSpec)
    assert spec.controller_url == f"http://{service_host('controller', 'mindie-motor')}:1027"
    assert spec.advertise_host == HOST_PLACEHOLDER
    store = json.loads(next(iter(spec.engine.files.values())))
    assert store["master_server_address"] == "kv-pool.mindie-motor.svc.cluster.local:50088"
    assert spec.engine.argv[3:5] == ["--engine-host", HOST_PLACEHOLDER]
    coordinator = plan.component("coordinator").spec
    assert isinstance(coordinator, CoordinatorSpec) and coordinator.bind_host == "0.0.0.0"
    assert (
        prefill.ports
        == plan.component("decode-0").ports
        == {"nm": 1030, "engine": 10000, "engine-status": 10001}
    )
    assert (prefill.replicas, prefill.accelerators) == (1, 2)
    assert prefill.argv[0] == "python3"
    assert plan.coordinator_url == "http://coordinator.mindie-motor.svc.cluster.local:1025"


def test_local_config_previewed_as_kubernetes() -> None:
    plan = build_plan(sim_topology(), target="kubernetes")
    assert plan.deploy_mode == "local" and plan.target == "kubernetes"
    assert plan.component("prefill-1").ports["nm"] == 1030
    spec = plan.component("prefill-0").spec
    assert isinstance(spec, NodeManagerSpec)
    assert spec.controller_url.startswith("http://controller.simjob.svc")


def test_single_container_shares_one_pod() -> None:
    plan = build_plan(sim_topology("single_container"))
    assert plan.component("prefill-1").ports["nm"] == 1031
    spec = plan.component("prefill-1").spec
    assert isinstance(spec, NodeManagerSpec)
    assert spec.controller_url == f"http://{HOST_PLACEHOLDER}:1027"


def test_union_instances_follow_the_aggregated_role() -> None:
    engine = {"engine_type": "sim", "engine_config": {"served_model_name": "sim"}}
    user = {
        "version": "v2.0",
        "motor_deploy_config": {"hybrid_instances_num": 2, "deploy_mode": "local", "hardware_type": "cpu"},
        "motor_engine_union_config": engine,
    }
    plan = build_plan(load_documents(user, {"version": "2.0.0"}), config_dir="/c")
    assert [(c.name, c.role, c.index) for c in plan.node_managers] == [
        ("union-0", "union", 0),
        ("union-1", "union", 1),
    ]
    assert plan.component("union-1").ports == {"nm": 1031, "engine": 10002, "engine-status": 10003}
    spec = plan.component("union-1").spec
    assert isinstance(spec, NodeManagerSpec) and (spec.role, spec.instance_id) == ("union", "union-1")
    coordinator = plan.component("coordinator").spec
    assert isinstance(coordinator, CoordinatorSpec)
    assert (coordinator.profile.value, coordinator.required_roles) == ("aggregated", ["union"])


def test_required_roles() -> None:
    assert required_roles(DispatchProfile.PREFILL_FIRST, {"prefill", "decode"}) == ["prefill", "decode"]
    assert required_roles(DispatchProfile.CONCURRENT, {"prefill", "decode", "encode"}) == [
        "prefill",
        "decode",
        "encode",
    ]
    assert required_roles(DispatchProfile.AGGREGATED, {"union"}) == ["union"]
    assert required_roles(DispatchProfile.AGGREGATED, {"prefill", "decode"}) == ["prefill"]
