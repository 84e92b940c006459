"""`motor deploy` for a config without deploy_mode: local only when the topology fits this host, otherwise a
message saying how to deploy on Kubernetes; `--default-deploy-mode` (used by examples/deployer/deploy.py)."""

import argparse
import importlib.util
import json
from pathlib import Path

import pytest

from motor.cli.deploy import _choose_target
from motor.cli.main import main
from motor.config import Topology, load_documents
from motor.deploy.k8s.manifests import ConfigTexts

REPO = Path(__file__).resolve().parents[2]
SIM = REPO / "examples" / "sim"
SEED = REPO / "examples" / "infer_engines" / "vllm"


def texts_without_deploy_mode(example: Path) -> ConfigTexts:
    user = json.loads((example / "user_config.json").read_text())
    del user["motor_deploy_config"]["deploy_mode"]
    return ConfigTexts(json.dumps(user), (example / "env.json").read_text())


def choose(texts: ConfigTexts, **options: object) -> Topology | int:
    settings = {
        "dry_run": False,
        "update_config": False,
        "update_instance_num": False,
        "default_deploy_mode": None,
    }
    args = argparse.Namespace(**{**settings, **options})
    topology = load_documents(json.loads(texts.user), json.loads(texts.env))
    assert topology.user.motor_deploy_config.deploy_mode is None
    return _choose_target(topology, texts, args)


def test_a_topology_that_fits_this_host_is_deployed_locally() -> None:
    chosen = choose(texts_without_deploy_mode(SIM))
    assert isinstance(chosen, Topology)
    assert chosen.user.motor_deploy_config.deploy_mode == "local"
    assert "deploy_mode" in chosen.user.motor_deploy_config.model_fields_set


def test_a_cluster_topology_is_not_started_locally(capsys: pytest.CaptureFixture[str]) -> None:
    assert choose(texts_without_deploy_mode(SEED)) == 2
    message = capsys.readouterr().err
    assert "does not fit this host (local: no (" in message
    assert "set motor_deploy_config.deploy_mode to multi_deployment" in message


def test_default_deploy_mode_applies_to_a_config_without_one() -> None:
    chosen = choose(texts_without_deploy_mode(SEED), default_deploy_mode="infer_service_set")
    assert isinstance(chosen, Topology)
    assert chosen.user.motor_deploy_config.deploy_mode == "infer_service_set"


def test_dry_run_without_deploy_mode_renders_kubernetes_objects(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.mkdir()
    texts = texts_without_deploy_mode(SEED)
    (config / "user_config.json").write_text(texts.user)
    (config / "env.json").write_text(texts.env)
    assert main(["deploy", "--config-dir", str(config), "--dry-run", "--output", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "02-controller.yaml").is_file()


def test_the_pymotor_deployer_entry_keeps_pymotor_defaults() -> None:
    spec = importlib.util.spec_from_file_location(
        "pymotor_deploy", REPO / "examples" / "deployer" / "deploy.py"
    )
    assert spec is not None and spec.loader is not None
    deployer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(deployer)
    argv = deployer.motor_arguments(deployer.parse_args(["--config_dir", "x", "--dry-run"]))
    assert argv[:3] == ["deploy", "--default-deploy-mode", "infer_service_set"]
    assert argv[-2:] == ["--output", "output_yamls"]
