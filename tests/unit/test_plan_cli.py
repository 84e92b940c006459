"""`motor deploy/status/stop` hand local configs to the local backend with a local plan."""

import json
from pathlib import Path
from typing import Any

import pytest

from motor.cli import local_job, local_status
from motor.cli.main import main
from motor.config import Topology
from motor.deploy.plan import Plan

SIM_ENGINE = {
    "engine_type": "sim",
    "engine_config": {
        "served_model_name": "sim",
        "kv_transfer_config": {"kv_connector": "MooncakeConnectorV1"},
    },
}
SIM_USER = {
    "version": "v2.0",
    "motor_deploy_config": {
        "p_instances_num": 1,
        "d_instances_num": 1,
        "deploy_mode": "local",
        "job_id": "demo",
    },
    "motor_engine_prefill_config": SIM_ENGINE,
    "motor_engine_decode_config": SIM_ENGINE,
}


@pytest.fixture
def config_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "config"
    directory.mkdir()
    (directory / "user_config.json").write_text(json.dumps(SIM_USER))
    (directory / "env.json").write_text(json.dumps({"version": "2.0.0"}))
    return directory


@pytest.fixture
def local_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[Any, ...]]]:
    """Records what the CLI hands its local commands instead of starting processes."""
    calls: list[tuple[str, tuple[Any, ...]]] = []

    def recorder(name: str, code: int):  # type: ignore[no-untyped-def]
        def record(*args: Any) -> int:
            calls.append((name, args))
            return code

        return record

    monkeypatch.setattr(local_job, "deploy", recorder("deploy", 0))
    monkeypatch.setattr(local_status, "status", recorder("status", 0))
    monkeypatch.setattr(local_job, "stop", recorder("stop", 3))
    return calls


def test_deploy_local_gets_a_local_plan_under_the_run_root(
    config_dir: Path,
    tmp_path: Path,
    local_calls: list[tuple[str, tuple[Any, ...]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MOTOR_RUN_ROOT", str(tmp_path / "runs"))
    assert main(["deploy", "--config-dir", str(config_dir)]) == 0
    [(name, (plan, topology, run_root))] = local_calls
    assert name == "deploy"
    assert isinstance(plan, Plan) and isinstance(topology, Topology)
    assert run_root == tmp_path / "runs"
    assert plan.target == "local"
    assert plan.config_dir == str(tmp_path / "runs" / "demo" / "config")
    assert plan.run_dir == str(tmp_path / "runs" / "demo")
    assert [c.name for c in plan.node_managers] == ["prefill-0", "decode-0"]


def test_an_engine_section_that_cannot_be_launched_is_reported_by_path(
    config_dir: Path, local_calls: list[tuple[str, tuple[Any, ...]]], capsys: pytest.CaptureFixture[str]
) -> None:
    user = json.loads((config_dir / "user_config.json").read_text())
    for section in ("motor_engine_prefill_config", "motor_engine_decode_config"):
        user[section] = {**SIM_ENGINE, "engine_type": "vllm"}
    (config_dir / "user_config.json").write_text(json.dumps(user))
    assert main(["deploy", "--config-dir", str(config_dir)]) == 2
    err = capsys.readouterr().err
    assert "2 problem(s)" in err
    for section in ("motor_engine_prefill_config", "motor_engine_decode_config"):
        assert f"{section}.engine_config.model: required for a vllm engine" in err
    assert local_calls == []


def test_status_and_stop_pass_the_job_and_exit_code(
    config_dir: Path, tmp_path: Path, local_calls: list[tuple[str, tuple[Any, ...]]]
) -> None:
    assert main(["status", "--run-root", str(tmp_path / "r")]) == 0
    assert main(["stop", "--config-dir", str(config_dir), "--run-root", str(tmp_path / "r")]) == 3
    assert local_calls == [("status", (tmp_path / "r", None)), ("stop", (tmp_path / "r", "demo"))]


@pytest.mark.parametrize(("flag", "scale"), [("--update-config", False), ("--update-instance-num", True)])
def test_update_flags_of_a_local_config_go_to_the_local_backend(
    config_dir: Path,
    tmp_path: Path,
    local_calls: list[tuple[str, tuple[Any, ...]]],
    monkeypatch: pytest.MonkeyPatch,
    flag: str,
    scale: bool,
) -> None:
    updates: list[tuple[str, Path, bool]] = []

    def update(topology: Topology, run_root: Path, *, scale: bool) -> int:
        updates.append((topology.user.motor_deploy_config.job_id, run_root, scale))
        return 0

    monkeypatch.setattr(local_job, "update", update)
    assert main(["deploy", "--config-dir", str(config_dir), flag, "--run-root", str(tmp_path / "r")]) == 0
    assert updates == [("demo", tmp_path / "r", scale)]
    assert local_calls == []  # nothing deployed


def test_update_of_a_job_that_does_not_run_locally_says_how_to_deploy_it(
    config_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_root = tmp_path / "empty"
    assert (
        main(["deploy", "--config-dir", str(config_dir), "--update-config", "--run-root", str(run_root)]) == 1
    )
    err = capsys.readouterr().err
    assert "--update-config: no local job 'demo' runs in" in err and "motor deploy" in err


def test_validate_explain_prints_every_compiled_spec(
    config_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MOTOR_RUN_ROOT", str(tmp_path / "runs"))
    assert main(["validate", "--config-dir", str(config_dir), "--explain"]) == 0
    out = capsys.readouterr().out
    for name in ("controller", "coordinator", "prefill-0", "decode-0"):
        assert f"--- {name} (" in out
        assert f"{tmp_path / 'runs' / 'demo' / 'config' / name}.spec.json" in out
    assert '"kind": "node_manager"' in out and '"env": "MOTOR_INSTANCE_CREDENTIAL_PREFILL_0"' in out


def test_validate_reports_what_the_plan_cannot_compile(
    config_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    user = json.loads((config_dir / "user_config.json").read_text())
    user["motor_engine_prefill_config"] = {**SIM_ENGINE, "engine_type": "vllm"}
    user["motor_engine_decode_config"] = {**SIM_ENGINE, "engine_type": "vllm"}
    (config_dir / "user_config.json").write_text(json.dumps(user))
    assert main(["validate", "--config-dir", str(config_dir)]) == 2
    assert "motor_engine_decode_config.engine_config.model: required" in capsys.readouterr().err
