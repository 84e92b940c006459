"""pyMotor's TLS settings: which one each component uses, the checks that name their paths, and the specs'
URLs, probes and TLS files; env.json names a shell can take."""

import json
from pathlib import Path
from typing import Any

import pytest

from motor.config import ConfigError, load_documents
from motor.deploy.plan import build_plan
from motor.protocol.specs import ControllerSpec, CoordinatorSpec, NodeManagerSpec

REPO = Path(__file__).resolve().parents[2]
USER = json.loads((REPO / "examples" / "sim" / "user_config.json").read_text())
ENV = json.loads((REPO / "examples" / "sim" / "env.json").read_text())


def tls(name: str, **extra: Any) -> dict[str, Any]:
    return {"enable_tls": True, "cert_file": f"/tls/{name}.crt", "key_file": f"/tls/{name}.key", **extra}


def with_user(**sections: Any) -> dict[str, Any]:
    user = json.loads(json.dumps(USER))
    for path, value in sections.items():
        node = user
        *parents, key = path.split("__")
        for part in parents:
            node = node.setdefault(part, {})
        node[key] = value
    return user


def problems(user: dict[str, Any], env: dict[str, Any] = ENV) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_documents(user, env)
    return [str(issue) for issue in caught.value.issues]


def test_deploy_level_settings_apply_and_a_component_section_wins() -> None:
    user = with_user(
        motor_deploy_config__tls_config={
            "mgmt_tls_config": tls("mgmt", ca_file="/tls/ca.crt"),
            "infer_tls_config": tls("infer"),
        },
        motor_controller_config__mgmt_tls_config=tls("controller", ca_file="/tls/ca.crt"),
    )
    plan = build_plan(load_documents(user, ENV), config_dir="/run/config")
    controller, coordinator = plan.component("controller").spec, plan.component("coordinator").spec
    node_manager = plan.component("prefill-0").spec
    assert isinstance(controller, ControllerSpec) and isinstance(coordinator, CoordinatorSpec)
    assert isinstance(node_manager, NodeManagerSpec)
    assert controller.mgmt_tls is not None and controller.mgmt_tls.cert_file == "/tls/controller.crt"
    assert coordinator.mgmt_tls is not None and coordinator.mgmt_tls.cert_file == "/tls/mgmt.crt"
    assert coordinator.infer_tls is not None and coordinator.infer_tls.ca_file is None
    assert node_manager.mgmt_tls == coordinator.mgmt_tls
    assert controller.coordinator_urls[0].startswith("https://")
    assert node_manager.controller_url.startswith("https://")
    assert plan.coordinator_url.startswith("https://") and plan.controller_url.startswith("https://")
    assert plan.component("prefill-0").probe_url("startup", "127.0.0.1").startswith("https://")
    assert plan.mgmt_tls == controller.mgmt_tls
    # the files travel as paths; the coordinator's config in its spec has no TLS sections and no keys
    assert "infer_tls_config" not in plan.files["coordinator.spec.json"]


def test_without_tls_everything_stays_plain_http() -> None:
    plan = build_plan(load_documents(USER, ENV), config_dir="/run/config")
    assert plan.coordinator_url.startswith("http://") and plan.mgmt_tls is None
    spec = plan.component("controller").spec
    assert isinstance(spec, ControllerSpec) and spec.mgmt_tls is None


def test_management_tls_is_all_or_nothing() -> None:
    user = with_user(motor_controller_config__mgmt_tls_config=tls("controller"))
    found = problems(user)
    assert any(
        line.startswith("motor_deploy_config.tls_config.mgmt_tls_config.enable_tls: management TLS is off")
        for line in found
    ), found


def test_tls_files_are_checked_by_path() -> None:
    user = with_user(
        motor_deploy_config__tls_config={
            "infer_tls_config": {"enable_tls": True, "cert_file": "relative.crt", "crl_file": "/tls/x.crl"},
            "etcd_tls_config": {
                "enable_tls": True,
                "cert_file": "/tls/c.crt",
                "ca_file": "/ca",
                "crl_file": "/c",
            },
        }
    )
    found = problems(user)
    base = "motor_deploy_config.tls_config"
    assert f"{base}.infer_tls_config.key_file: required with enable_tls" in " ".join(found)
    assert any(
        line.startswith(f"{base}.infer_tls_config.cert_file: 'relative.crt' must be an absolute")
        for line in found
    )
    assert any(line.startswith(f"{base}.infer_tls_config.crl_file: revocation") for line in found)
    assert any(
        line.startswith(f"{base}.etcd_tls_config.key_file: a client certificate needs") for line in found
    )
    assert any(line.startswith(f"{base}.etcd_tls_config.crl_file: the etcd client (gRPC)") for line in found)


def test_env_names_a_shell_cannot_take_are_config_errors() -> None:
    env = {**ENV, "motor_common_env": {"GOOD_NAME": "1", "BAD-NAME": "2", "X; rm -rf /": "3"}}
    found = problems(USER, env)
    assert sorted(line.split(":")[1] for line in found) == [
        "motor_common_env.BAD-NAME",
        "motor_common_env.X; rm -rf /",
    ]


def test_api_keys_are_named_by_the_spec_and_handed_over_in_the_environment() -> None:
    user = with_user(
        motor_coordinator_config__api_key_config={"enable_api_key": True, "valid_keys": ["k1", "k2"]}
    )
    env = {**ENV, "motor_engine_prefill_env": {"HF_TOKEN": "hf-secret"}}
    local = build_plan(load_documents(user, env), config_dir="/run/config")
    coordinator = local.component("coordinator")
    assert isinstance(coordinator.spec, CoordinatorSpec)
    assert coordinator.spec.api_keys is not None and coordinator.spec.config.api_key_config.valid_keys == []
    assert coordinator.env["MOTOR_API_KEYS"] == "k1\nk2"
    assert all("k1" not in text and "hf-secret" not in text for text in local.files.values())
    engine = local.component("prefill-0").spec
    assert isinstance(engine, NodeManagerSpec)
    assert [ref.env for ref in engine.engine.secret_env] == ["HF_TOKEN"]

    kubernetes = build_plan(load_documents(user, env), target="kubernetes")
    assert kubernetes.secrets == {"motor-credentials": {"MOTOR_API_KEYS": "k1\nk2", "HF_TOKEN": "hf-secret"}}
    assert "MOTOR_API_KEYS" not in kubernetes.component("coordinator").env
    assert "HF_TOKEN" not in kubernetes.component("prefill-0").env
    assert {item.env for item in kubernetes.component("prefill-0").secret_env} == {
        "HF_TOKEN",
        "MOTOR_INSTANCE_CREDENTIAL_PREFILL_0",
    }
