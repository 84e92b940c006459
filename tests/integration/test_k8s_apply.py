"""Apply, scale, update-config, status and delete through the real CLI against the kmock Kubernetes emulator.

kmock serves the Kubernetes REST API in memory on 127.0.0.1 (no validation, no server-side apply, updates only
by PATCH); the sync `kubernetes` client runs in a thread so the emulator's event loop keeps serving.
"""

import asyncio
import json
import socket
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kmock
import pytest
import yaml

from motor.cli.main import main
from motor.config import load_config
from motor.deploy.k8s.client import APPLY_PATCH
from motor.deploy.k8s.manifests import ConfigTexts, build_manifests
from motor.deploy.plan import build_plan
from motor.protocol.credentials import instance_credential
from tests.integration.k8s_support import REPO, copy_seed, edit_user_config, sim_user_config, write_config

MODIFYING = ("POST", "PATCH", "PUT", "DELETE")


@dataclass
class Cluster:
    emulator: kmock.KubernetesEmulator
    kubeconfig: Path

    async def motor(self, *argv: str | Path) -> int:
        args = [str(arg) for arg in argv] + ["--kubeconfig", str(self.kubeconfig)]
        return await asyncio.to_thread(main, args)

    def stored(self) -> dict[tuple[str, str], dict[str, Any]]:
        result = {}
        for obj in self.emulator.objects.values():
            if not obj.deleted:
                raw = obj.raw
                result[raw["kind"], raw["metadata"]["name"]] = raw
        return result

    def requests(self) -> list[kmock.Request]:
        return list(self.emulator)

    def changes_since(self, mark: int) -> list[tuple[str, str]]:
        """(method, object name) of every modifying request after the first `mark` (SSA probes excluded)."""
        changes = []
        for request in self.requests()[mark:]:
            if request.method.value not in MODIFYING or request.params.get("dryRun") == "All":
                continue
            name = (
                request.data["metadata"]["name"]
                if request.method.value == "POST"
                else request.url.path.rsplit("/", 1)[-1]
            )
            changes.append((request.method.value, name))
        return changes


def write_kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "test", "cluster": {"server": server}}],
                "users": [{"name": "test", "user": {"token": "test-token"}}],
                "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
                "current-context": "test",
            }
        )
    )
    return path


# kmock serves a resource once it holds an object of it or it is declared: a real API server serves these always
# (the planner's RBAC objects; a job without a planner has none to list when it is deleted).
DECLARED = (
    "v1/serviceaccounts",
    "rbac.authorization.k8s.io/v1/roles",
    "rbac.authorization.k8s.io/v1/rolebindings",
)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with kmock.KubernetesEmulator() as emulator, kmock.Server(emulator):
        for resource in DECLARED:
            emulator.resources[resource] = {}
        yield Cluster(emulator, write_kubeconfig(tmp_path / "kubeconfig", str(emulator.url).rstrip("/")))


def expected_objects(config_dir: Path, token: str | None = None) -> dict[tuple[str, str], dict[str, Any]]:
    topology = load_config(config_dir / "user_config.json", config_dir / "env.json")
    texts = ConfigTexts((config_dir / "user_config.json").read_text(), (config_dir / "env.json").read_text())
    files = build_manifests(build_plan(topology, target="kubernetes"), topology, texts, token=token)
    return {(obj["kind"], obj["metadata"]["name"]): obj for f in files for obj in f.objects}


def deployment_names(stored: dict[tuple[str, str], dict[str, Any]]) -> set[str]:
    return {name for kind, name in stored if kind == "Deployment"}


# ---- deploy -----------------------------------------------------------------------------------------------


async def test_deploy_applies_every_object(
    cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = copy_seed(tmp_path / "seed")
    assert await cluster.motor("deploy", "--config-dir", config) == 0
    stored = cluster.stored()
    token = stored["Secret", "motor-controller-token"]["stringData"]["token"]
    assert len(token) >= 32
    expected = expected_objects(config, token)
    assert set(stored) == set(expected)
    for key, obj in expected.items():
        assert stored[key] == obj, key
    out = capsys.readouterr().out
    assert "deployed job mindie-motor to namespace mindie-motor: 15 object(s) via create-or-update" in out
    assert "Deployment/prefill-0" in out


async def test_redeploy_updates_in_place(cluster: Cluster, tmp_path: Path) -> None:
    config = write_config(tmp_path / "sim", sim_user_config())
    assert await cluster.motor("deploy", "--config-dir", config) == 0
    token = cluster.stored()["Secret", "motor-controller-token"]
    edit_user_config(config, lambda doc: doc["motor_deploy_config"].update(image_name="motor:v2"))
    mark = len(cluster.requests())
    assert await cluster.motor("deploy", "--config-dir", config) == 0
    stored = cluster.stored()
    assert stored["Secret", "motor-controller-token"] == token
    assert (
        stored["Deployment", "prefill-0"]["spec"]["template"]["spec"]["containers"][0]["image"] == "motor:v2"
    )
    assert set(stored) == set(expected_objects(config))
    methods = {method for method, _ in cluster.changes_since(mark)}
    assert "PATCH" in methods


async def test_server_side_apply_is_used_when_the_server_supports_it(tmp_path: Path) -> None:
    # kmock's scaffold (no object store) scripted to answer server-side apply as a real API server does: 200
    # with the applied object. Any other request gets a 404 and would fail the deploy.
    async with kmock.KubernetesScaffold() as scaffold, kmock.Server(scaffold):
        scaffold["patch", kmock.headers({"Content-Type": APPLY_PATCH})] << (lambda request: request.data)
        scaffold["post", kmock.resource("", "v1", "secrets")] << 201 << (lambda request: request.data)
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", str(scaffold.url).rstrip("/"))
        config = write_config(tmp_path / "sim", sim_user_config())
        args = ["deploy", "--config-dir", str(config), "--kubeconfig", str(kubeconfig)]
        assert await asyncio.to_thread(main, args) == 0
        requests = list(scaffold)
    object_requests = [r for r in requests if r.method.value != "GET"]
    secret = [r for r in object_requests if r.url.path.endswith("/secrets")]
    assert [r.method.value for r in secret] == ["POST"]  # created once, never applied over
    probe, *applies = [r for r in object_requests if r not in secret]
    assert probe.params.get("dryRun") == "All"
    assert len(applies) == len(expected_objects(config)) - 1
    for request in applies:
        assert request.method.value == "PATCH"
        assert request.headers["Content-Type"] == APPLY_PATCH
        assert (request.params["fieldManager"], request.params["force"]) == ("motor", "true")


async def test_every_failure_is_reported_with_object_and_reason(
    cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rejection = {"kind": "Status", "reason": "Invalid", "message": "spec.replicas: Invalid value: -1"}
    for name in ("decode-0", "coordinator"):
        (
            cluster.emulator["post", kmock.data({"kind": "Deployment", "metadata": {"name": name}})]
            << 422
            << rejection
        )
    config = write_config(tmp_path / "sim", sim_user_config())
    assert await cluster.motor("deploy", "--config-dir", config) == 1
    err = capsys.readouterr().err
    assert "failed Deployment/decode-0: HTTP 422 Invalid: spec.replicas: Invalid value: -1" in err
    assert "failed Deployment/coordinator: HTTP 422 Invalid" in err
    assert "2 object(s) failed" in err
    assert ("Deployment", "prefill-1") in cluster.stored()


async def test_unreachable_cluster_fails_cleanly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{port}")
    config = write_config(tmp_path / "sim", sim_user_config())
    args = ["deploy", "--config-dir", str(config), "--kubeconfig", str(kubeconfig)]
    assert await asyncio.to_thread(main, args) == 1
    assert f"cannot reach the Kubernetes API at http://127.0.0.1:{port}" in capsys.readouterr().err


async def test_dry_run_makes_no_api_call(cluster: Cluster, tmp_path: Path) -> None:
    config = write_config(tmp_path / "sim", sim_user_config())
    assert (
        await cluster.motor("deploy", "--config-dir", config, "--dry-run", "--output", tmp_path / "out") == 0
    )
    assert cluster.requests() == []
    assert sorted(p.name for p in (tmp_path / "out").iterdir())[-1] == "08-monitoring.yaml"


# ---- scale ------------------------------------------------------------------------------------------------


async def test_scale_out_adds_only_the_new_instances(cluster: Cluster, tmp_path: Path) -> None:
    config = write_config(tmp_path / "sim", sim_user_config(prefill=2, decode=1))
    assert await cluster.motor("deploy", "--config-dir", config) == 0
    before = cluster.stored()
    edit_user_config(config, lambda doc: doc["motor_deploy_config"].update(p_instances_num=4))
    mark = len(cluster.requests())
    assert await cluster.motor("deploy", "--config-dir", config, "--update-instance-num") == 0
    changes = cluster.changes_since(mark)
    assert {name for _, name in changes} == {
        "motor-config",
        "motor-instance-credentials",
        "prefill-2",
        "prefill-3",
    }
    assert [name for method, name in changes if method == "POST" and not name.startswith("motor-")] == [
        "prefill-2",
        "prefill-3",
    ]
    stored = cluster.stored()
    # the new node managers' credentials derive from the token the cluster already holds
    token = stored["Secret", "motor-controller-token"]["stringData"]["token"]
    credentials = stored["Secret", "motor-instance-credentials"]["stringData"]
    assert credentials["prefill-3"] == instance_credential(token, "prefill-3")
    assert deployment_names(stored) >= {"prefill-0", "prefill-1", "prefill-2", "prefill-3", "decode-0"}
    assert stored["Deployment", "prefill-0"] == before["Deployment", "prefill-0"]
    baseline = json.loads(stored["ConfigMap", "motor-config"]["data"]["user_config.json"])
    assert baseline["motor_deploy_config"]["p_instances_num"] == 4


async def test_scale_in_removes_the_highest_indices_first(cluster: Cluster, tmp_path: Path) -> None:
    config = write_config(tmp_path / "sim", sim_user_config(prefill=4, decode=2))
    assert await cluster.motor("deploy", "--config-dir", config) == 0

    def shrink(doc: dict[str, Any]) -> None:
        doc["motor_deploy_config"].update(p_instances_num=1, d_instances_num=1)

    edit_user_config(config, shrink)
    mark = len(cluster.requests())
    assert await cluster.motor("deploy", "--config-dir", config, "--update-instance-num") == 0
    deleted = [name for method, name in cluster.changes_since(mark) if method == "DELETE"]
    assert deleted == ["prefill-3", "prefill-2", "decode-1", "prefill-1"]
    assert {n for n in deployment_names(cluster.stored()) if n[-1].isdigit()} == {"prefill-0", "decode-0"}


async def test_scale_refuses_other_changes_listing_them(
    cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path / "sim", sim_user_config())
    assert await cluster.motor("deploy", "--config-dir", config) == 0

    def change(doc: dict[str, Any]) -> None:
        doc["motor_deploy_config"].update(p_instances_num=3, image_name="motor:other")
        doc["motor_coordinator_config"]["logging_config"]["log_level"] = "DEBUG"

    edit_user_config(config, change)
    mark = len(cluster.requests())
    assert await cluster.motor("deploy", "--config-dir", config, "--update-instance-num") == 1
    err = capsys.readouterr().err
    assert (
        "refused: --update-instance-num only changes d_instances_num, hybrid_instances_num, p_instances_num"
        in err
    )
    listed = [line.strip() for line in err.splitlines() if line.startswith("  ")]
    assert listed == ["motor_coordinator_config.logging_config.log_level", "motor_deploy_config.image_name"]
    assert cluster.changes_since(mark) == []


async def test_scale_without_a_deployed_baseline_is_refused(
    cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path / "sim", sim_user_config())
    assert await cluster.motor("deploy", "--config-dir", config, "--update-instance-num") == 1
    assert "deploy once without --update-instance-num first" in capsys.readouterr().err
    assert cluster.stored() == {}


# ---- update-config ----------------------------------------------------------------------------------------


async def test_update_config_changes_only_the_config_map(cluster: Cluster, tmp_path: Path) -> None:
    config = write_config(tmp_path / "sim", sim_user_config())
    assert await cluster.motor("deploy", "--config-dir", config) == 0
    before = cluster.stored()

    def change(doc: dict[str, Any]) -> None:
        doc["motor_coordinator_config"]["logging_config"]["log_level"] = "DEBUG"
        doc["motor_coordinator_config"]["exception_config"] = {"max_retry": 2}
        doc["motor_coordinator_config"]["timeout_config"] = {"read_timeout": 30}

    edit_user_config(config, change)
    mark = len(cluster.requests())
    assert await cluster.motor("deploy", "--config-dir", config, "--update-config") == 0
    assert {name for _, name in cluster.changes_since(mark)} == {"motor-config", "coordinator"}
    after = cluster.stored()
    assert (
        after["ConfigMap", "motor-config"]["data"]["user_config.json"]
        == (config / "user_config.json").read_text()
    )
    rolled = after["Deployment", "coordinator"]["spec"]["template"]["metadata"]["annotations"]
    assert len(rolled["motor.io/config-revision"]) == 16
    for key, obj in before.items():
        if key[0] != "ConfigMap" and key != ("Deployment", "coordinator"):
            assert after[key] == obj


async def test_update_config_refuses_non_whitelisted_changes(
    cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path / "sim", sim_user_config())
    assert await cluster.motor("deploy", "--config-dir", config) == 0
    baseline = cluster.stored()["ConfigMap", "motor-config"]

    def change(doc: dict[str, Any]) -> None:
        doc["motor_deploy_config"]["p_instances_num"] = 3
        doc["motor_coordinator_config"]["logging_config"]["log_level"] = "DEBUG"
        doc["motor_coordinator_config"]["scheduler_config"] = {"scheduler_type": "round_robin"}

    edit_user_config(config, change)
    env = json.loads((config / "env.json").read_text())
    env["motor_common_env"]["NEW_VAR"] = "1"
    (config / "env.json").write_text(json.dumps(env))
    mark = len(cluster.requests())
    assert await cluster.motor("deploy", "--config-dir", config, "--update-config") == 1
    err = capsys.readouterr().err
    listed = [line.strip() for line in err.splitlines() if line.startswith("  ")]
    assert listed == [
        "motor_coordinator_config.scheduler_config.scheduler_type",
        "motor_deploy_config.p_instances_num",
        "env.json:motor_common_env.NEW_VAR",
    ]
    assert "change instance counts with --update-instance-num" in err
    assert cluster.changes_since(mark) == []
    assert cluster.stored()["ConfigMap", "motor-config"] == baseline


async def test_update_config_with_no_change_does_nothing(
    cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path / "sim", sim_user_config())
    assert await cluster.motor("deploy", "--config-dir", config) == 0
    mark = len(cluster.requests())
    assert await cluster.motor("deploy", "--config-dir", config, "--update-config") == 0
    assert "nothing to update" in capsys.readouterr().out
    assert cluster.changes_since(mark) == []


# ---- status / stop ----------------------------------------------------------------------------------------


async def test_status_lists_the_deployments(
    cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path / "sim", sim_user_config())
    assert await cluster.motor("status", "--k8s", "--job-id", "simjob") == 1
    assert await cluster.motor("deploy", "--config-dir", config) == 0
    capsys.readouterr()
    assert await cluster.motor("status", "--k8s", "--config-dir", config) == 0
    rows = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines()[2:]}
    assert rows["prefill-1"][:3] == ["node-manager", "prefill", "0/1"]
    assert rows["kv-pool"][:2] == ["kv-pool", "-"]


async def test_stop_deletes_only_the_jobs_objects(cluster: Cluster, tmp_path: Path) -> None:
    config = write_config(tmp_path / "sim", sim_user_config())
    assert await cluster.motor("deploy", "--config-dir", config) == 0
    other = sim_user_config()
    other["motor_deploy_config"]["job_id"] = "otherjob"
    other_config = write_config(tmp_path / "other", other)
    assert await cluster.motor("deploy", "--config-dir", other_config) == 0
    foreign = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "user-data", "namespace": "simjob"},
    }
    cluster.emulator.objects[kmock.resource("", "v1", "configmaps"), "simjob", "user-data"] = foreign

    assert await cluster.motor("stop", "--k8s", "--config-dir", config) == 0
    remaining = cluster.stored()
    assert ("ConfigMap", "user-data") in remaining
    jobs = {obj["metadata"].get("labels", {}).get("motor.io/job") for obj in remaining.values()}
    assert jobs == {"otherjob", None}
    assert len(remaining) == len(expected_objects(other_config)) + 1


async def test_prometheus_operator_objects_are_applied_and_deleted_with_the_job(
    cluster: Cluster, tmp_path: Path
) -> None:
    config = write_config(tmp_path / "sim", sim_user_config())
    assert await cluster.motor("deploy", "--config-dir", config, "--prometheus-operator") == 0
    stored = cluster.stored()
    assert {
        ("PodMonitor", "motor"),
        ("PrometheusRule", "motor"),
        ("ConfigMap", "motor-grafana-dashboard"),
    } <= set(stored)
    assert await cluster.motor("stop", "--k8s", "--config-dir", config) == 0
    assert cluster.stored() == {}


async def test_stop_without_a_job_is_a_usage_error(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await cluster.motor("stop", "--k8s") == 2
    assert "give --job-id or the config" in capsys.readouterr().err


# ---- pyMotor-compatible entry -----------------------------------------------------------------------------


async def test_compat_deployer_entry_deploys(cluster: Cluster, tmp_path: Path) -> None:
    config = copy_seed(tmp_path / "seed")
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(REPO / "examples" / "deployer" / "deploy.py"),
        "--config",
        str(config / "user_config.json"),
        "--env",
        str(config / "env.json"),
        "--kubeconfig",
        str(cluster.kubeconfig),
        cwd=tmp_path,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert await asyncio.wait_for(process.wait(), timeout=60) == 0
    assert set(cluster.stored()) == set(expected_objects(config))


async def test_compat_deployer_entry_checks_its_flags(tmp_path: Path) -> None:
    script = str(REPO / "examples" / "deployer" / "deploy.py")
    log = tmp_path / "err.log"
    with log.open("wb") as err:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            script,
            "--config",
            "u.json",
            cwd=tmp_path,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=err,
        )
        assert await asyncio.wait_for(process.wait(), timeout=60) == 2
    assert "Both --config and --env must be specified together" in log.read_text()
    with log.open("wb") as err:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            script,
            "--config_dir",
            str(REPO / "examples" / "infer_engines" / "vllm"),
            "--dry-run",
            cwd=tmp_path,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=err,
        )
        assert await asyncio.wait_for(process.wait(), timeout=60) == 0
    assert (tmp_path / "output_yamls" / "04-prefill-0.yaml").is_file()


# ---- credentials ------------------------------------------------------------------------------------------


def with_api_keys(*keys: str) -> dict[str, Any]:
    user = sim_user_config()
    user["motor_coordinator_config"]["api_key_config"] = {"enable_api_key": True, "valid_keys": list(keys)}
    return user


async def test_credentials_live_in_a_secret_that_redeploys_update(cluster: Cluster, tmp_path: Path) -> None:
    config = write_config(tmp_path / "sim", with_api_keys("key-one", "key-two"))
    assert await cluster.motor("deploy", "--config-dir", config) == 0
    stored = cluster.stored()
    assert stored["Secret", "motor-credentials"]["stringData"] == {"MOTOR_API_KEYS": "key-one\nkey-two"}
    assert "key-one" not in json.dumps(stored["ConfigMap", "motor-config"])
    token = stored["Secret", "motor-controller-token"]

    edit_user_config(
        config,
        lambda doc: doc["motor_coordinator_config"]["api_key_config"].update(valid_keys=["key-three"]),
    )
    assert await cluster.motor("deploy", "--config-dir", config) == 0
    stored = cluster.stored()
    assert stored["Secret", "motor-credentials"]["stringData"] == {"MOTOR_API_KEYS": "key-three"}
    assert stored["Secret", "motor-controller-token"] == token  # generated once, never overwritten


async def test_update_config_refuses_changed_credentials(
    cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path / "sim", with_api_keys("key-one"))
    assert await cluster.motor("deploy", "--config-dir", config) == 0
    # the baseline holds markers, not the keys: a changed key is still noticed, against the deployed Secret
    edit_user_config(
        config, lambda doc: doc["motor_coordinator_config"]["api_key_config"].update(valid_keys=["key-two"])
    )
    mark = len(cluster.requests())
    assert await cluster.motor("deploy", "--config-dir", config, "--update-config") == 1
    listed = [line.strip() for line in capsys.readouterr().err.splitlines() if line.startswith("  ")]
    assert listed == [
        "Secret/motor-credentials:MOTOR_API_KEYS (api_key_config.valid_keys or an env.json credential)"
    ]
    assert cluster.changes_since(mark) == []
