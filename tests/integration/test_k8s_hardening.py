"""The hardening rules, checked on every object motor generates for every example, every valid corpus config and
sim variants that turn on every credential and TLS setting (and the planner): security contexts, resources, no
service-account token and no RBAC but the planner's namespaced Role, NetworkPolicies that leave only the inference port open, the management port on its own
Service, credentials only in Secrets (referenced with secretKeyRef) and strict schema validity."""

import json
from collections.abc import Iterator
from typing import Any

import pytest

from motor.config import ConfigError, load_documents
from motor.config.hardware import engines_as_root
from motor.deploy.k8s.manifests import ConfigTexts, build_manifests
from motor.deploy.k8s.rbac import PLANNER_ACCOUNT, PLANNER_RULES
from motor.deploy.k8s.secrets import TLS_SECRETS
from motor.deploy.plan import build_plan, is_secret_name
from tests.integration.k8s_support import REPO, SIM_ENV, example_dirs, sim_user_config
from tests.integration.test_k8s_manifests import validate_all

CORPUS = REPO / "tests" / "compat" / "corpus"
JOB = "motor.io/job"
API_KEYS = ["plain-api-key-123", "salt:1000:" + "ab" * 32]
ETCD_AUTH_SECRET = "etcd-credentials"
SECRET_VALUES = ["hf_secret_token_value", "etcd-user-password"]
CONTROL = {"controller", "coordinator", "kv-pool", "planner"}


def tls(directory: str) -> dict[str, Any]:
    return {
        "enable_tls": True,
        "ca_file": f"/etc/tls/{directory}/ca.crt",
        "cert_file": f"/etc/tls/{directory}/tls.crt",
        "key_file": f"/etc/tls/{directory}/tls.key",
        "passwd_file": f"/etc/tls/{directory}/key.passwd",
    }


def everything_on(
    deploy_mode: str, hardware_type: str, accelerators: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A sim config with every credential and TLS setting motor knows turned on."""
    user = sim_user_config(deploy_mode, hardware_type=hardware_type, accelerators=accelerators)
    user["motor_deploy_config"]["tls_config"] = {
        "infer_tls_config": tls("infer"),
        "mgmt_tls_config": tls("mgmt"),
        "etcd_tls_config": {"enable_tls": True, "ca_file": "/etc/tls/etcd/ca.crt"},
    }
    user["motor_coordinator_config"]["api_key_config"] = {"enable_api_key": True, "valid_keys": API_KEYS}
    user["motor_controller_config"] = {
        "etcd_config": {"enable_etcd_persistence": True, "etcd_auth_secret": ETCD_AUTH_SECRET}
    }
    env = json.loads(json.dumps(SIM_ENV))
    env["motor_engine_prefill_env"] = {
        **env.get("motor_engine_prefill_env", {}),
        "HF_TOKEN": SECRET_VALUES[0],
    }
    env["motor_controller_env"] = {
        "MOTOR_ETCD_PASSWORD": SECRET_VALUES[1],
        "MOTOR_ETCD_USERNAME": "motor-etcd-admin",
    }
    return user, env


def cases() -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    for directory in example_dirs():
        yield (
            f"example:{directory.relative_to(REPO / 'examples')}",
            json.loads((directory / "user_config.json").read_text()),
            json.loads((directory / "env.json").read_text()),
        )
    for directory in sorted(CORPUS.iterdir()):
        if (directory / "user_config.json").is_file():
            yield (
                f"corpus:{directory.name}",
                json.loads((directory / "user_config.json").read_text()),
                json.loads((directory / "env.json").read_text()),
            )
    for deploy_mode in ("multi_deployment", "single_container"):
        for hardware_type, accelerators in (("cpu", 0), ("nvidia-gpu", 1), ("800I_A3", 2)):
            user, env = everything_on(deploy_mode, hardware_type, accelerators)
            yield f"secured:{deploy_mode}:{hardware_type}", user, env
    user, env = everything_on("multi_deployment", "nvidia-gpu", 1)
    user["motor_planner_config"] = {"enable": True, "max_accelerators": 8}
    yield "secured:planner:nvidia-gpu", user, env


def objects_of(user: dict[str, Any], env: dict[str, Any]) -> list[dict[str, Any]] | None:
    """Every object (namespace and operator objects included), or None for a config that is refused."""
    try:
        topology = load_documents(user, env)
        plan = build_plan(topology, target="kubernetes")
    except ConfigError:
        return None
    texts = ConfigTexts(json.dumps(user, indent=2), json.dumps(env, indent=2))
    files = build_manifests(plan, topology, texts, create_namespace=True, prometheus_operator=True)
    return [obj for manifest_file in files for obj in manifest_file.objects]


CASES = {name: (user, env) for name, user, env in cases()}
BUILT = {name: objects_of(user, env) for name, (user, env) in CASES.items()}


def test_the_table_covers_examples_corpus_and_every_hardware() -> None:
    built = [name for name, objects in BUILT.items() if objects is not None]
    assert sum(name.startswith("corpus:") for name in built) >= 9
    assert sum(name.startswith("example:") for name in built) >= 3
    assert sum(name.startswith("secured:") for name in built) == 7  # 6 hardware x mode, and the planner


def pods(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (obj["metadata"]["name"], obj["spec"]["template"]) for obj in objects if obj["kind"] == "Deployment"
    ]


def hardware(name: str) -> str:
    return CASES[name][0].get("motor_deploy_config", {}).get("hardware_type", "cpu")


BUILT_CASES = sorted(name for name, objects in BUILT.items() if objects is not None)


@pytest.mark.parametrize("name", BUILT_CASES)
def test_pods_are_hardened(name: str) -> None:
    objects = BUILT[name]
    assert objects is not None
    for pod_name, template in pods(objects):
        pod = template["spec"]
        if pod_name == "planner":  # the one pod that calls the Kubernetes API, as its own ServiceAccount
            assert (
                pod["automountServiceAccountToken"] is True and pod["serviceAccountName"] == PLANNER_ACCOUNT
            )
        else:
            assert pod["automountServiceAccountToken"] is False and "serviceAccountName" not in pod, pod_name
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, pod_name
        engine_pod = pod_name not in CONTROL
        as_root = engine_pod and engines_as_root(hardware(name))
        assert pod["securityContext"].get("runAsNonRoot", False) is (not as_root), pod_name
        if not as_root:
            assert pod["securityContext"]["runAsUser"] != 0
        volumes = {volume["name"]: volume for volume in pod["volumes"]}
        for container in pod["containers"]:
            security = container["securityContext"]
            assert security["allowPrivilegeEscalation"] is False and security["privileged"] is False
            assert security["capabilities"] == {"drop": ["ALL"]}
            assert security["readOnlyRootFilesystem"] is (pod_name in CONTROL or _sim_engine(name, pod_name))
            writable = [m for m in container["volumeMounts"] if not m.get("readOnly")]
            assert all("emptyDir" in volumes[m["name"]] for m in writable), pod_name
            assert "/tmp" in {m["mountPath"] for m in writable}
            resources = container.get("resources", {})
            if pod_name in CONTROL:
                assert {"cpu", "memory"} <= resources["requests"].keys() and "memory" in resources["limits"]
            if engine_pod:
                shm = next(m for m in container["volumeMounts"] if m["mountPath"] == "/dev/shm")
                assert volumes[shm["name"]]["emptyDir"]["medium"] == "Memory"
                assert volumes[shm["name"]]["emptyDir"]["sizeLimit"].endswith(("i", "M", "G"))
            for mount in container["volumeMounts"]:
                source = volumes[mount["name"]]
                if "secret" in source:
                    assert mount["readOnly"] is True and source["secret"]["defaultMode"] == 0o440


def _sim_engine(name: str, pod_name: str) -> bool:
    """Engine pods of the simulator keep a read-only root (it writes only to its run directory)."""
    if pod_name in CONTROL or pod_name == "single-container":
        return False
    role = pod_name.split("-")[0]  # prefill-0, decode-1, union-0, encode-0: the engine section's role
    return CASES[name][0].get(f"motor_engine_{role}_config", {}).get("engine_type") == "sim"


@pytest.mark.parametrize("name", BUILT_CASES)
def test_no_rbac_and_only_the_inference_port_is_open(name: str) -> None:
    objects = BUILT[name]
    assert objects is not None
    kinds = {obj["kind"] for obj in objects}
    by_name = {(obj["kind"], obj["metadata"]["name"]): obj for obj in objects}
    planned = ("Deployment", "planner") in by_name
    rbac = {(kind, name) for kind, name in by_name if kind in ("ServiceAccount", "Role", "RoleBinding")}
    assert rbac == (
        {(kind, PLANNER_ACCOUNT) for kind in ("ServiceAccount", "Role", "RoleBinding")} if planned else set()
    )
    assert not kinds & {"ClusterRole", "ClusterRoleBinding"}
    if planned:
        assert by_name["Role", PLANNER_ACCOUNT]["rules"] == PLANNER_RULES
    job = next(obj for obj in objects if obj["kind"] == "ConfigMap")["metadata"]["labels"][JOB]

    internal = by_name["NetworkPolicy", "motor-internal"]["spec"]
    own = {"matchLabels": {JOB: job, "app.kubernetes.io/part-of": "motor"}}
    assert internal["podSelector"] == own and internal["ingress"] == [{"from": [{"podSelector": own}]}]
    api = by_name["NetworkPolicy", "motor-coordinator-api"]["spec"]
    (rule,) = api["ingress"]
    assert "from" not in rule  # from anywhere, but only to the inference port
    infer = by_name["Service", "coordinator"]["spec"]["ports"]
    assert [(p["name"], p["port"]) for p in infer] == [("infer", rule["ports"][0]["port"])]
    assert [p["name"] for p in by_name["Service", "coordinator-mgmt"]["spec"]["ports"]] == ["mgmt"]
    for pod_name, template in pods(objects):
        labels = template["metadata"]["labels"]
        assert own["matchLabels"].items() <= labels.items(), pod_name
        serves_api = api["podSelector"]["matchLabels"].items() <= labels.items()
        assert serves_api == (pod_name in ("coordinator", "single-container")), pod_name


@pytest.mark.parametrize("name", BUILT_CASES)
def test_credentials_only_in_secrets(name: str) -> None:
    objects = BUILT[name]
    assert objects is not None
    secrets = {obj["metadata"]["name"]: obj["stringData"] for obj in objects if obj["kind"] == "Secret"}
    values = [value for data in secrets.values() for value in data.values() if value]
    if name.startswith("secured:"):
        assert set(API_KEYS) <= set(secrets["motor-credentials"]["MOTOR_API_KEYS"].splitlines())
        values += [*API_KEYS, *SECRET_VALUES]
    plain = json.dumps([obj for obj in objects if obj["kind"] != "Secret"])
    for value in values:
        assert value not in plain, f"{name}: a credential outside its Secret"
    known = set(secrets) | set(TLS_SECRETS.values()) | {ETCD_AUTH_SECRET}
    for pod_name, template in pods(objects):
        for container in template["spec"]["containers"]:
            for item in container["env"]:
                if is_secret_name(item["name"]):
                    reference = item["valueFrom"]["secretKeyRef"]
                    assert reference["name"] in known, (pod_name, item)
                    if reference["name"] in secrets:
                        assert reference["key"] in secrets[reference["name"]]


@pytest.mark.parametrize("name", BUILT_CASES)
def test_every_object_validates_strictly(name: str) -> None:
    objects = BUILT[name]
    assert objects is not None
    validate_all([obj for obj in objects if obj["kind"] not in ("PodMonitor", "PrometheusRule")])
