"""standby_config: the plan runs the controller and the coordinator as pairs electing a leader in etcd (locally a
second component on the next probe port, on Kubernetes 2 replicas), and the config refuses what cannot work."""

import copy
from typing import Any

import pytest

from motor.config import ConfigError, Topology, load_documents
from motor.deploy.k8s.manifests import ConfigTexts, build_manifests
from motor.deploy.plan import build_plan
from motor.deploy.prometheus import metrics_endpoints
from motor.protocol.specs import ControllerSpec, CoordinatorSpec
from tests.integration.k8s_support import sim_user_config

STANDBY = {"enable_master_standby": True, "master_lock_ttl": 4, "master_standby_check_interval": 1.0}


def standby_user_config() -> dict[str, Any]:
    user = sim_user_config("local", prefill=1, decode=1, pool=False)
    user["motor_controller_config"] = {
        "etcd_config": {"enable_etcd_persistence": True, "etcd_host": "etcd.example", "etcd_port": 2379},
        "standby_config": STANDBY,
    }
    user["motor_coordinator_config"] = {
        "etcd_config": {"etcd_host": "etcd.example", "etcd_port": 2379},
        "standby_config": STANDBY,
    }
    return user


USER = standby_user_config()
ENV = {"version": "2.0.0"}


def topology(changes: dict[str, Any] | None = None) -> Topology:
    return load_documents(merged(changes or {}), copy.deepcopy(ENV))


def merged(changes: dict[str, Any]) -> dict[str, Any]:
    user = copy.deepcopy(USER)
    for section, values in changes.items():
        for key, value in values.items():
            if isinstance(value, dict) and isinstance(user.get(section, {}).get(key), dict):
                user[section][key] = {**user[section][key], **value}
            else:
                user.setdefault(section, {})[key] = value
    return user


def issues(changes: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as caught:
        load_documents(merged(changes), copy.deepcopy(ENV))
    return {issue.path: issue.message for issue in caught.value.issues}


def test_local_pairs_share_serving_ports_and_answer_probes_on_their_own() -> None:
    plan = build_plan(topology(), config_dir="/run/simjob/config", run_dir="/run/simjob")
    assert [c.name for c in plan.components][:4] == [
        "controller",
        "controller-standby",
        "coordinator",
        "coordinator-standby",
    ]
    controller, controller_standby = plan.component("controller"), plan.component("controller-standby")
    assert controller.ports == {"api": 1027, "probe": 2027}
    assert controller_standby.ports == {"api": 1027, "probe": 2028}
    assert controller_standby.standby_for == "controller" and controller.standby_for is None
    assert controller_standby.argv[-1] == "/run/simjob/config/controller-standby.spec.json"
    assert {p.port for p in controller_standby.probes} == {"probe"}
    assert controller_standby.probe_url("readiness", "127.0.0.1") == "http://127.0.0.1:2028/readiness"
    spec = controller_standby.spec
    assert isinstance(spec, ControllerSpec) and spec.standby is not None
    assert (spec.name, spec.run_dir, spec.port) == (
        "controller-standby",
        "/run/simjob/controller-standby",
        1027,
    )
    assert spec.standby.lock_key == "/motor/simjob/controller/master_lock"
    assert (spec.standby.lease_ttl, spec.standby.refresh_interval, spec.standby.probe_port) == (4, 1.0, 2028)
    assert (spec.standby.etcd.host, spec.standby.etcd.port) == ("etcd.example", 2379)

    coordinator_standby = plan.component("coordinator-standby")
    assert coordinator_standby.ports == {"infer": 1025, "mgmt": 1026, "probe": 2026}
    coordinator_spec = coordinator_standby.spec
    assert isinstance(coordinator_spec, CoordinatorSpec) and coordinator_spec.standby is not None
    assert coordinator_spec.standby.lock_key == "/motor/simjob/coordinator/master_lock"
    # a standby's ports are its leader's: scraped once, under the leader's name
    assert {e.component for e in metrics_endpoints(plan)} >= {"controller", "coordinator"}
    assert not {e.component for e in metrics_endpoints(plan)} & {"controller-standby", "coordinator-standby"}


def test_without_standby_nothing_changes() -> None:
    off = {"enable_master_standby": False}
    plan = build_plan(
        topology(
            {
                "motor_controller_config": {"standby_config": off},
                "motor_coordinator_config": {"standby_config": off},
            }
        ),
        config_dir="/run/simjob/config",
    )
    assert "controller-standby" not in [c.name for c in plan.components]
    spec = plan.component("controller").spec
    assert isinstance(spec, ControllerSpec) and spec.standby is None
    assert plan.component("controller").ports == {"api": 1027}


def test_kubernetes_runs_two_replicas_and_the_readiness_probe_finds_the_leader() -> None:
    kubernetes = topology({"motor_deploy_config": {"deploy_mode": "multi_deployment"}})
    plan = build_plan(kubernetes, target="kubernetes")
    assert "controller-standby" not in [c.name for c in plan.components]
    for name in ("controller", "coordinator"):
        component = plan.component(name)
        assert component.replicas == 2 and component.ports["probe"] == 2027 - (name == "coordinator") * 2
        assert {p.port for p in component.probes} == {"probe"}
    files = build_manifests(plan, kubernetes, ConfigTexts(user="{}", env="{}"), token="t")
    objects = [obj for file in files for obj in file.objects]
    deployments = {o["metadata"]["name"]: o for o in objects if o.get("kind") == "Deployment"}
    for name in ("controller", "coordinator"):
        pod = deployments[name]["spec"]
        container = pod["template"]["spec"]["containers"][0]
        assert pod["replicas"] == 2
        assert "probe" in {port["name"] for port in container["ports"]}
        assert container["readinessProbe"]["httpGet"]["port"] == "probe"


def test_a_standby_controller_needs_the_registry_in_etcd() -> None:
    found = issues({"motor_controller_config": {"etcd_config": {"enable_etcd_persistence": False}}})
    assert (
        "enable_etcd_persistence to true"
        in found["motor_controller_config.standby_config.enable_master_standby"]
    )


def test_single_container_has_no_room_for_a_standby() -> None:
    found = issues({"motor_deploy_config": {"deploy_mode": "single_container"}})
    assert (
        "single_container runs one pod"
        in found["motor_coordinator_config.standby_config.enable_master_standby"]
    )


def test_the_lease_must_outlive_the_refresh_interval() -> None:
    found = issues({"motor_controller_config": {"standby_config": {"master_standby_check_interval": 4.0}}})
    (message,) = [m for path, m in found.items() if path.startswith("motor_controller_config.standby_config")]
    assert "must be shorter than master_lock_ttl" in message


def test_probe_ports_must_not_collide_on_one_host() -> None:
    found = issues({"motor_controller_config": {"standby_config": {"probe_port": 1025}}})
    assert "already used" in found["motor_controller_config.standby_config.probe_port"]
