"""Manifests from the plan: strict schema validation against Kubernetes 1.33 and the objects' content."""

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from motor.cli.main import main
from motor.config import ConfigError, load_config, load_documents
from motor.deploy.k8s.manifests import ConfigTexts, build_manifests
from motor.deploy.k8s.yaml_io import dump_all
from motor.deploy.plan import build_plan
from motor.protocol.credentials import instance_credential
from tests.integration.k8s_support import (
    SEED_DIR,
    SIM_ENV,
    example_dirs,
    sim_epd_config,
    sim_union_config,
    sim_user_config,
)

KUBERNETES_VERSION = "1.33.0"


def manifests_for(
    user: dict[str, Any], env: dict[str, Any] = SIM_ENV, **options: Any
) -> list[dict[str, Any]]:
    topology = load_documents(user, env)
    texts = ConfigTexts(json.dumps(user, indent=2), json.dumps(env, indent=2))
    files = build_manifests(build_plan(topology, target="kubernetes"), topology, texts, **options)
    return [obj for manifest_file in files for obj in manifest_file.objects]


def seed_manifests(**options: Any) -> list[dict[str, Any]]:
    user = json.loads((SEED_DIR / "user_config.json").read_text())
    env = json.loads((SEED_DIR / "env.json").read_text())
    return manifests_for(user, env, **options)


def by_kind_name(objects: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(obj["kind"], obj["metadata"]["name"]): obj for obj in objects}


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    return deployment["spec"]["template"]["spec"]["containers"][0]


def env_of(deployment: dict[str, Any]) -> dict[str, str]:
    return {item["name"]: item.get("value", "<from field>") for item in container(deployment)["env"]}


def validate_all(objects: list[dict[str, Any]]) -> None:
    # Round-trip through the YAML motor writes, so what is validated is what `kubectl apply` would read.
    for document in yaml.safe_load_all(dump_all(objects)):
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


SIM_VARIANTS = {
    "local-cpu-sim": sim_user_config("local"),
    "multi-cpu-sim": sim_user_config("multi_deployment"),
    "multi-nvidia-2-pods": sim_user_config(
        "multi_deployment", hardware_type="nvidia-gpu", pods=2, accelerators=1
    ),
    "multi-no-pool": sim_user_config("multi_deployment", pool=False),
    "single-container-a3": sim_user_config("single_container", hardware_type="800I_A3", accelerators=2),
    "multi-union": sim_union_config(),
    "multi-epd": sim_epd_config(),
    "single-container-union": sim_union_config("single_container"),
}


@pytest.mark.parametrize(
    "example", example_dirs(), ids=lambda path: str(path.relative_to(SEED_DIR.parents[1]))
)
def test_every_example_validates_strictly(example: Path) -> None:
    topology = load_config(example / "user_config.json", example / "env.json")
    texts = ConfigTexts((example / "user_config.json").read_text(), (example / "env.json").read_text())
    files = build_manifests(build_plan(topology, target="kubernetes"), topology, texts, create_namespace=True)
    objects = [obj for manifest_file in files for obj in manifest_file.objects]
    assert {"Namespace", "ConfigMap", "Deployment", "Service", "NetworkPolicy"} <= {
        obj["kind"] for obj in objects
    }
    validate_all(objects)


@pytest.mark.parametrize("variant", sorted(SIM_VARIANTS))
def test_sim_variants_validate_strictly(variant: str) -> None:
    validate_all(manifests_for(SIM_VARIANTS[variant], create_namespace=True))


def test_validation_catches_a_broken_object() -> None:
    deployment = by_kind_name(seed_manifests())["Deployment", "prefill-0"]
    container(deployment)["ports"][0]["protocl"] = "TCP"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_all([deployment])


def test_seed_objects_and_layout() -> None:
    objects = by_kind_name(seed_manifests(create_namespace=True))
    assert set(objects) == {
        ("Namespace", "mindie-motor"),
        ("ConfigMap", "motor-config"),
        ("Secret", "motor-controller-token"),
        ("Secret", "motor-instance-credentials"),
        ("Deployment", "kv-pool"),
        ("Service", "kv-pool"),
        ("Deployment", "controller"),
        ("Service", "controller"),
        ("Deployment", "coordinator"),
        ("Service", "coordinator"),
        ("Service", "coordinator-mgmt"),
        ("Deployment", "prefill-0"),
        ("Deployment", "decode-0"),
        ("NetworkPolicy", "motor-internal"),
        ("NetworkPolicy", "motor-coordinator-api"),
        ("ConfigMap", "motor-grafana-dashboard"),
    }
    assert all(
        obj["metadata"].get("namespace") == "mindie-motor"
        for key, obj in objects.items()
        if key[0] != "Namespace"
    )
    # motor calls no Kubernetes API: no RBAC, and no pod gets a service-account token
    for key, obj in objects.items():
        if key[0] == "Deployment":
            pod = obj["spec"]["template"]["spec"]
            assert pod["automountServiceAccountToken"] is False and "serviceAccountName" not in pod


def test_labels_and_selectors_are_consistent() -> None:
    objects = seed_manifests()
    deployments = [obj for obj in objects if obj["kind"] == "Deployment"]
    for obj in objects:
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/part-of"] == "motor"
        assert labels["motor.io/job"] == "mindie-motor"
    for deployment in deployments:
        template_labels = deployment["spec"]["template"]["metadata"]["labels"]
        selector = deployment["spec"]["selector"]["matchLabels"]
        assert selector.items() <= template_labels.items()
        assert template_labels["app.kubernetes.io/name"] == deployment["metadata"]["name"]
    for service in (obj for obj in objects if obj["kind"] == "Service"):
        matched = [
            d
            for d in deployments
            if service["spec"]["selector"].items() <= d["spec"]["template"]["metadata"]["labels"].items()
        ]
        expected = {"coordinator-mgmt": "coordinator"}.get(
            service["metadata"]["name"], service["metadata"]["name"]
        )
        assert [d["metadata"]["name"] for d in matched] == [expected]
        ports = {p["name"] for p in container(matched[0])["ports"]}
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports
    prefill = by_kind_name(objects)["Deployment", "prefill-0"]["metadata"]["labels"]
    assert (prefill["motor.io/role"], prefill["motor.io/index"], prefill["motor.io/component"]) == (
        "prefill",
        "0",
        "node-manager",
    )


def test_engine_deployments_get_accelerators_weights_and_entry_point() -> None:
    prefill = by_kind_name(seed_manifests())["Deployment", "prefill-0"]
    engine = container(prefill)
    assert prefill["spec"]["replicas"] == 1
    assert engine["resources"] == {
        "requests": {"huawei.com/Ascend910": 2},
        "limits": {"huawei.com/Ascend910": 2},
    }
    assert engine["command"] == [
        "python3",
        "-m",
        "motor.node_manager",
        "--spec",
        "/etc/motor/prefill-0.spec.json",
    ]
    assert engine["image"].startswith("quay.io/ascend/mindie-motor:")
    volumes = {v["name"]: v for v in prefill["spec"]["template"]["spec"]["volumes"]}
    assert volumes["weight"]["hostPath"]["path"] == "/mnt/weight"
    assert {"name": "weight", "mountPath": "/mnt/weight", "readOnly": True} in engine["volumeMounts"]
    assert volumes["config"]["configMap"]["name"] == "motor-config"
    assert prefill["spec"]["strategy"] == {"type": "Recreate"}


def test_a_coordinator_routing_on_kv_events_reads_the_engines_tokenizer_from_the_weights() -> None:
    user = json.loads((SEED_DIR / "user_config.json").read_text())
    env = json.loads((SEED_DIR / "env.json").read_text())
    plain = by_kind_name(manifests_for(user, env))["Deployment", "coordinator"]
    assert "weight" not in {mount["name"] for mount in container(plain)["volumeMounts"]}
    user["motor_coordinator_config"]["scheduler_config"]["scheduler_type"] = "kv_cache_affinity"
    objects = manifests_for(user, env)
    validate_all(objects)
    coordinator = by_kind_name(objects)["Deployment", "coordinator"]
    volumes = {v["name"]: v for v in coordinator["spec"]["template"]["spec"]["volumes"]}
    assert volumes["weight"]["hostPath"]["path"] == "/mnt/weight"
    assert {"name": "weight", "mountPath": "/mnt/weight", "readOnly": True} in container(coordinator)[
        "volumeMounts"
    ]
    assert "resources" in container(coordinator) and "huawei.com/Ascend910" not in str(container(coordinator))


def test_accelerator_resource_follows_hardware_type() -> None:
    nvidia = by_kind_name(manifests_for(SIM_VARIANTS["multi-nvidia-2-pods"]))["Deployment", "decode-0"]
    assert container(nvidia)["resources"]["limits"] == {"nvidia.com/gpu": 1}
    assert nvidia["spec"]["replicas"] == 2
    cpu = by_kind_name(manifests_for(sim_user_config(accelerators=4)))["Deployment", "decode-0"]
    assert "resources" not in container(cpu)


def test_probes_hit_the_components_real_endpoints() -> None:
    objects = by_kind_name(seed_manifests())
    expected_port = {"controller": "api", "coordinator": "mgmt", "prefill-0": "nm", "kv-pool": "metrics"}
    for name, port in expected_port.items():
        engine = container(objects["Deployment", name])
        port_numbers = {p["name"]: p["containerPort"] for p in engine["ports"]}
        for kind in ("startup", "readiness", "liveness"):
            probe = engine[f"{kind}Probe"]["httpGet"]
            assert probe["port"] == port and port in port_numbers
            assert probe["path"] == ("/health" if name == "kv-pool" else f"/{kind}")
    coordinator_ports = {
        p["name"]: p["containerPort"] for p in container(objects["Deployment", "coordinator"])["ports"]
    }
    assert coordinator_ports == {"infer": 1025, "mgmt": 1026}


def test_pool_master_service_and_engine_store_config() -> None:
    objects = by_kind_name(seed_manifests())
    pool_ports = {(p["name"], p["port"]) for p in objects["Service", "kv-pool"]["spec"]["ports"]}
    assert pool_ports == {("rpc", 50088), ("metrics", 9003)}
    master = container(objects["Deployment", "kv-pool"])["command"]
    assert (
        master[0] == "mooncake_master"
        and "--rpc_port=50088" in master
        and "--default_kv_lease_ttl=11000" in master
    )
    spec = json.loads(objects["ConfigMap", "motor-config"]["data"]["decode-0.spec.json"])
    engine = spec["engine"]
    store_path = engine["env"]["MOONCAKE_CONFIG_PATH"]
    assert store_path == "/var/run/motor/decode-0/decode-0.mooncake.json"
    store = json.loads(engine["files"][store_path])
    assert store["master_server_address"] == "kv-pool.mindie-motor.svc.cluster.local:50088"
    assert store["protocol"] == "ascend"


def test_addresses_use_services_and_pod_ip() -> None:
    objects = by_kind_name(seed_manifests())
    env = env_of(objects["Deployment", "prefill-0"])
    assert env["POD_IP"] == "<from field>"
    assert env["MOTOR_ADVERTISE_HOST"] == "$(POD_IP)"
    assert env["HCCL_BUFFSIZE"] == "256"
    specs = objects["ConfigMap", "motor-config"]["data"]
    assert json.loads(specs["prefill-0.spec.json"])["controller_url"] == (
        "http://controller.mindie-motor.svc.cluster.local:1027"
    )
    assert json.loads(specs["controller.spec.json"])["coordinator_urls"] == [
        "http://coordinator-mgmt.mindie-motor.svc.cluster.local:1026"
    ]


def node_manager_credentials(objects: dict[tuple[str, str], Any], token: str) -> None:
    """Each node manager takes its own instance's credential, derived from `token`, and not the token."""
    credentials = objects["Secret", "motor-instance-credentials"]["stringData"]
    assert credentials == {name: instance_credential(token, name) for name in credentials}
    assert {"prefill-0", "decode-0"} <= set(credentials)
    for name in ("prefill-0", "decode-0"):
        env = container(objects["Deployment", name])["env"]
        assert "MOTOR_CONTROLLER_TOKEN" not in {item["name"] for item in env}
        (credential,) = [item for item in env if item["name"].startswith("MOTOR_INSTANCE_CREDENTIAL_")]
        assert credential == {
            "name": f"MOTOR_INSTANCE_CREDENTIAL_{name.upper().replace('-', '_')}",
            "valueFrom": {"secretKeyRef": {"name": "motor-instance-credentials", "key": name}},
        }


def test_registration_token_comes_from_a_secret_unless_env_json_sets_it() -> None:
    objects = by_kind_name(manifests_for(SIM_VARIANTS["multi-cpu-sim"], token="fixed-token"))
    assert objects["Secret", "motor-controller-token"]["stringData"] == {"token": "fixed-token"}
    for name in ("controller", "coordinator"):
        env = container(objects["Deployment", name])["env"]
        token = next(item for item in env if item["name"] == "MOTOR_CONTROLLER_TOKEN")
        assert token["valueFrom"]["secretKeyRef"] == {"name": "motor-controller-token", "key": "token"}
    node_manager_credentials(objects, "fixed-token")
    assert "MOTOR_CONTROLLER_TOKEN" not in env_of(objects["Deployment", "kv-pool"])

    env_json = {**SIM_ENV, "motor_common_env": {"MOTOR_CONTROLLER_TOKEN": "from-env-json"}}
    objects = by_kind_name(manifests_for(SIM_VARIANTS["multi-cpu-sim"], env_json))
    assert ("Secret", "motor-controller-token") not in objects
    assert objects["Secret", "motor-credentials"]["stringData"] == {"MOTOR_CONTROLLER_TOKEN": "from-env-json"}
    for name in ("controller", "coordinator"):
        env = container(objects["Deployment", name])["env"]
        token = next(item for item in env if item["name"] == "MOTOR_CONTROLLER_TOKEN")
        assert token == {
            "name": "MOTOR_CONTROLLER_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "motor-credentials", "key": "MOTOR_CONTROLLER_TOKEN"}},
        }
    node_manager_credentials(objects, "from-env-json")
    assert "MOTOR_CONTROLLER_TOKEN" not in env_of(objects["Deployment", "kv-pool"])
    assert "from-env-json" not in json.dumps(objects["ConfigMap", "motor-config"])


def test_config_map_holds_the_config_as_written() -> None:
    config_map = by_kind_name(seed_manifests())["ConfigMap", "motor-config"]
    assert config_map["data"]["user_config.json"] == json.dumps(
        json.loads((SEED_DIR / "user_config.json").read_text()), indent=2
    )
    assert (
        "mooncake_store.json"
        not in by_kind_name(manifests_for(SIM_VARIANTS["multi-no-pool"]))["ConfigMap", "motor-config"]["data"]
    )


def test_local_config_preview_runs_as_multi_deployment() -> None:
    objects = by_kind_name(manifests_for(SIM_VARIANTS["local-cpu-sim"]))
    stored = json.loads(objects["ConfigMap", "motor-config"]["data"]["user_config.json"])
    assert stored["motor_deploy_config"]["deploy_mode"] == "multi_deployment"
    assert ("Deployment", "prefill-1") in objects


def test_single_container_runs_everything_in_one_pod() -> None:
    objects = by_kind_name(manifests_for(SIM_VARIANTS["single-container-a3"]))
    assert [key for key in objects if key[0] == "Deployment"] == [("Deployment", "single-container")]
    pod = objects["Deployment", "single-container"]["spec"]["template"]["spec"]
    motor = pod["containers"][0]
    assert motor["resources"]["limits"] == {"huawei.com/Ascend910": 6}
    script = motor["command"][2]
    assert "start prefill-1 env" in script and "--spec /etc/motor/prefill-1.spec.json" in script
    assert motor["readinessProbe"]["httpGet"] == {"path": "/readiness", "port": "mgmt"}
    service = objects["Service", "coordinator"]
    assert service["spec"]["selector"]["app.kubernetes.io/name"] == "single-container"


def test_union_instances_get_one_deployment_each() -> None:
    objects = by_kind_name(manifests_for(SIM_VARIANTS["multi-union"]))
    assert {name for kind, name in objects if kind == "Deployment"} == {
        "controller",
        "coordinator",
        "union-0",
        "union-1",
    }
    union = objects["Deployment", "union-1"]
    assert union["metadata"]["labels"]["motor.io/role"] == "union"
    assert container(union)["command"][-2:] == ["--spec", "/etc/motor/union-1.spec.json"]


def test_encode_instances_get_one_deployment_each_with_their_ec_role() -> None:
    objects = by_kind_name(manifests_for(SIM_VARIANTS["multi-epd"]))
    deployments = {name for kind, name in objects if kind == "Deployment"}
    assert {"encode-0", "encode-1", "prefill-0", "prefill-1", "decode-0"} <= deployments
    encode = objects["Deployment", "encode-1"]
    assert encode["metadata"]["labels"]["motor.io/role"] == "encode"
    assert container(encode)["command"][-2:] == ["--spec", "/etc/motor/encode-1.spec.json"]
    specs = next(
        obj for obj in objects.values() if obj["kind"] == "ConfigMap" and "encode-1.spec.json" in obj["data"]
    )
    for instance, role in (("encode-1", "ec_producer"), ("prefill-0", "ec_consumer")):
        argv = json.loads(specs["data"][f"{instance}.spec.json"])["engine"]["argv"]
        ec = json.loads(argv[argv.index("--ec-transfer-config") + 1])
        assert ec == {
            "ec_connector": "ECExampleConnector",
            "ec_connector_extra_config": {"shared_storage_path": "/shared/ec"},
            "ec_role": role,
        }


def test_single_container_refuses_several_pods_per_instance() -> None:
    with pytest.raises(ConfigError, match="single_p_instance_pod_num: prefill instances need 2 pods"):
        manifests_for(sim_user_config("single_container", pods=2))


def test_dry_run_writes_files_that_validate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "out"
    assert main(["deploy", "--config-dir", str(SEED_DIR), "--dry-run", "--output", str(output)]) == 0
    names = sorted(path.name for path in output.iterdir())
    assert names[0] == "00-config.yaml" and "02-controller.yaml" in names
    for path in output.iterdir():
        for document in yaml.safe_load_all(path.read_text()):
            kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)
    assert "dry run: nothing applied" in capsys.readouterr().out


def test_dry_run_without_output_prints_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["deploy", "--config-dir", str(SEED_DIR), "--dry-run"]) == 0
    documents = list(yaml.safe_load_all(capsys.readouterr().out))
    assert ("Deployment", "decode-0") in by_kind_name(documents)


def test_output_without_dry_run_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["deploy", "--config-dir", str(SEED_DIR), "--output", str(tmp_path)]) == 2
    assert "--output and --include-secrets only go with --dry-run" in capsys.readouterr().err


def test_config_errors_print_one_line_each_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    user = sim_user_config()
    user["motor_deploy_config"]["p_instances_num"] = 0
    user["motor_deploy_config"]["hardware_type"] = "tpu"
    (tmp_path / "user_config.json").write_text(json.dumps(user))
    (tmp_path / "env.json").write_text(json.dumps(SIM_ENV))
    assert main(["deploy", "--config-dir", str(tmp_path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "motor_deploy_config.p_instances_num" in err and "motor_deploy_config.hardware_type" in err


def test_dry_run_writes_secret_values_only_when_asked(tmp_path: Path) -> None:
    user = sim_user_config()
    user["motor_coordinator_config"]["api_key_config"] = {
        "enable_api_key": True,
        "valid_keys": ["key-in-config"],
    }
    config = tmp_path / "config"
    config.mkdir()
    (config / "user_config.json").write_text(json.dumps(user))
    (config / "env.json").write_text(json.dumps(SIM_ENV))

    def written(*flags: str) -> str:
        output = tmp_path / f"out{len(flags)}"
        assert (
            main(["deploy", "--config-dir", str(config), "--dry-run", "--output", str(output), *flags]) == 0
        )
        return "".join(path.read_text() for path in sorted(output.iterdir()))

    redacted = written()
    assert "key-in-config" not in redacted
    assert "<redacted: in Secret motor-credentials, key MOTOR_API_KEYS>" in redacted
    for document in yaml.safe_load_all(redacted):
        if document["kind"] == "Secret":
            assert all(value.startswith("<redacted") for value in document["stringData"].values())
    assert "key-in-config" in written("--include-secrets")


def test_tls_files_come_from_secrets_and_probes_present_a_certificate() -> None:
    user = sim_user_config()
    files = {"ca_file": "/etc/mgmt/ca.crt", "cert_file": "/etc/mgmt/tls.crt", "key_file": "/etc/mgmt/tls.key"}
    user["motor_deploy_config"]["tls_config"] = {"mgmt_tls_config": {"enable_tls": True, **files}}
    objects = by_kind_name(manifests_for(user))
    controller = objects["Deployment", "controller"]
    volumes = {v["name"]: v for v in controller["spec"]["template"]["spec"]["volumes"]}
    (mount,) = [m for m in container(controller)["volumeMounts"] if "secret" in volumes[m["name"]]]
    assert (mount["mountPath"], mount["readOnly"]) == ("/etc/mgmt", True)
    secret = volumes[mount["name"]]["secret"]
    assert secret["secretName"] == "motor-mgmt-tls"
    assert [item["key"] for item in secret["items"]] == ["ca.crt", "tls.crt", "tls.key"]
    probe = container(controller)["readinessProbe"]["exec"]["command"]
    assert probe[:4] == ["python3", "-m", "motor.runtime.probe", "https://{advertise_host}:1027/readiness"]
    assert probe[4:] == [
        "--cert-file",
        "/etc/mgmt/tls.crt",
        "--key-file",
        "/etc/mgmt/tls.key",
        "--ca-file",
        "/etc/mgmt/ca.crt",
    ]
    # the pool master speaks no motor TLS: kubelet probes it as before
    assert "httpGet" in container(objects["Deployment", "kv-pool"])["readinessProbe"]


def test_tls_files_of_two_channels_in_one_directory_are_refused() -> None:
    user = sim_user_config()
    same = {"enable_tls": True, "cert_file": "/etc/tls/a.crt", "key_file": "/etc/tls/a.key"}
    user["motor_deploy_config"]["tls_config"] = {"mgmt_tls_config": same, "infer_tls_config": same}
    with pytest.raises(ValueError, match="/etc/tls: TLS files of two channels"):
        manifests_for(user)
