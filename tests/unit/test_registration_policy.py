"""The controller's registration policy: what the plan's own node managers announce is admitted; an address
outside the job (another host, cloud metadata, a path, another instance's ports) is refused with the field."""

from pathlib import Path
from typing import Any

import pytest

from motor.config import load_config
from motor.controller.admission import AddressRefused, check_registration, node_manager_base_url
from motor.deploy.plan import Plan, build_plan
from motor.node_manager.service import announced
from motor.node_manager.settings import node_settings
from motor.protocol.controller import Registration
from motor.protocol.specs import ControllerSpec, NodeManagerSpec, RegistrationPolicy, dump_spec, load_spec
from tests.unit.test_plan import SEED, sim_topology

POD_IP = "10.244.1.7"
ENVIRON = {"MOTOR_ADVERTISE_HOST": POD_IP}


def policy_of(plan: Plan) -> RegistrationPolicy:
    spec = plan.component("controller").spec
    assert isinstance(spec, ControllerSpec)
    return spec.registration


def registrations(plan: Plan, tmp_path: Path) -> list[Registration]:
    """What each node manager of the plan announces, from its spec file as the node manager loads it."""
    found = []
    for component in plan.node_managers:
        assert isinstance(component.spec, NodeManagerSpec)
        path = tmp_path / f"{component.name}.spec.json"
        path.write_text(dump_spec(component.spec))
        spec = load_spec(path, NodeManagerSpec, ENVIRON)
        credential = {spec.credential.env: "unused here"}
        found.append(announced(node_settings(spec, {**ENVIRON, **credential}), "starting"))
    return found


@pytest.mark.parametrize(
    "plan",
    [
        build_plan(sim_topology(), config_dir="/c"),
        build_plan(sim_topology(pool=False), config_dir="/c"),
        build_plan(load_config(SEED / "user_config.json", SEED / "env.json")),
    ],
    ids=["local", "local-no-pool", "kubernetes"],
)
def test_every_node_manager_of_the_plan_is_admitted(plan: Plan, tmp_path: Path) -> None:
    policy = policy_of(plan)
    announced = registrations(plan, tmp_path)
    assert len(announced) == len(plan.node_managers) >= 2
    for registration in announced:
        check_registration(registration, policy)


def local_registration(**changes: Any) -> tuple[Registration, RegistrationPolicy]:
    plan = build_plan(sim_topology(), config_dir="/c")
    policy = policy_of(plan)
    spec = plan.component("prefill-0").spec
    assert isinstance(spec, NodeManagerSpec)
    registration = Registration(
        instance_id="prefill-0",
        role="prefill",
        engine_id="prefill-0",
        model_name="sim",
        node_manager_url=f"http://127.0.0.1:{spec.port}",
        endpoints=[
            {
                "host": "127.0.0.1",
                "port": spec.engine.port,
                "status_port": spec.engine.status_port,
                "bootstrap_port": spec.engine.bootstrap_port,
            }
        ],
        engine_state="starting",
    )
    check_registration(registration, policy)
    return registration.model_copy(update=changes), policy


def endpoint_with(registration: Registration, **changes: Any) -> dict[str, Any]:
    return {"endpoints": [registration.endpoints[0].model_copy(update=changes)]}


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://169.254.169.254:1030", "outside the job's networks"),
        ("http://10.0.0.5:1030", "outside the job's networks"),
        ("http://localhost:1030", "is not an IP address"),
        ("https://127.0.0.1:1030", "reached over http"),
        ("http://127.0.0.1:1030/admin", "carries a path"),
        ("http://user:pw@127.0.0.1:1030", "more than scheme, host and port"),
        ("http://127.0.0.1:1030?x=1", "more than scheme, host and port"),
        ("http://127.0.0.1", "names no port"),
        ("http://127.0.0.1:22", "is not a node manager port"),
        ("http://127.0.0.1:99999", "is not a URL"),
    ],
)
def test_a_node_manager_url_outside_the_job_is_refused(url: str, why: str) -> None:
    registration, policy = local_registration(node_manager_url=url)
    with pytest.raises(AddressRefused, match=why) as refused:
        check_registration(registration, policy)
    assert refused.value.field == "node_manager_url"
    with pytest.raises(AddressRefused):
        node_manager_base_url(url, policy)


def test_endpoints_must_be_the_instance_own() -> None:
    registration, policy = local_registration()
    endpoint = registration.endpoints[0]
    assert endpoint.status_port is not None and endpoint.bootstrap_port is None  # the sim serves no bootstrap
    cases = [
        (endpoint_with(registration, host="127.0.0.2"), "endpoints.0.host"),
        (endpoint_with(registration, host="169.254.169.254"), "endpoints.0.host"),
        (endpoint_with(registration, port=6379), "endpoints.0.port"),
        (endpoint_with(registration, status_port=endpoint.status_port + 5), "endpoints.0.status_port"),
        (endpoint_with(registration, bootstrap_port=8998), "endpoints.0.bootstrap_port"),
        ({"instance_id": "decode-0"}, "instance_id"),
        ({"instance_id": "prefill-0/../x"}, "instance_id"),
        ({"role": "union", "instance_id": "union-0"}, "role"),
    ]
    for changes, field in cases:
        changed = registration.model_copy(update=changes)
        with pytest.raises(AddressRefused) as refused:
            check_registration(changed, policy)
        assert refused.value.field == field, changes


def test_kubernetes_admits_the_configured_pod_networks_only() -> None:
    default = policy_of(build_plan(sim_topology(), target="kubernetes"))
    assert "127.0.0.0/8" not in default.networks and "10.0.0.0/8" in default.networks
    pinned = policy_of(build_plan(sim_topology(pod_networks=["10.244.0.0/16"]), target="kubernetes"))
    assert pinned.networks == ["10.244.0.0/16"]
    assert node_manager_base_url("http://10.244.3.4:1030/", pinned) == "http://10.244.3.4:1030"
    for url in ("http://10.0.0.1:1030", "http://127.0.0.1:1030", "http://[fd00::1]:1030"):
        with pytest.raises(AddressRefused, match="outside the job's networks"):
            node_manager_base_url(url, pinned)


def test_a_producer_announces_its_own_bootstrap_port() -> None:
    registration, policy = local_registration(instance_id="prefill-1")
    prefill = policy.roles["prefill"].model_copy(update={"bootstrap_port": 8998})
    policy = policy.model_copy(update={"roles": {**policy.roles, "prefill": prefill}})
    ordinal = 1  # the second node manager of the shared host
    base = registration.endpoints[0]
    registration = registration.model_copy(
        update={
            "node_manager_url": f"http://127.0.0.1:{prefill.node_manager_port + ordinal}",
            "endpoints": [
                base.model_copy(
                    update={"port": base.port + 2, "status_port": base.port + 3, "bootstrap_port": 8999}
                )
            ],
        }
    )
    check_registration(registration, policy)
    for port in (8998, 9000):  # prefill-0's, prefill-2's
        other = endpoint_with(registration, bootstrap_port=port)
        with pytest.raises(AddressRefused, match="is not this instance's 8999"):
            check_registration(registration.model_copy(update=other), policy)
