"""Compiled specs: round trip, late-bound pod address, clear errors."""

from pathlib import Path

import pytest

from motor.config import load_config
from motor.deploy.plan import build_plan
from motor.protocol.specs import (
    HOST_PLACEHOLDER,
    ControllerSpec,
    NodeManagerSpec,
    SpecError,
    load_spec,
)

SEED = Path(__file__).resolve().parents[2] / "examples" / "infer_engines" / "vllm"


def kubernetes_spec_file(tmp_path: Path, name: str) -> Path:
    plan = build_plan(load_config(SEED / "user_config.json", SEED / "env.json"))
    path = tmp_path / f"{name}.spec.json"
    path.write_text(plan.files[path.name])
    return path


def test_the_pod_address_is_bound_when_the_spec_is_loaded(tmp_path: Path) -> None:
    path = kubernetes_spec_file(tmp_path, "prefill-0")
    assert HOST_PLACEHOLDER in path.read_text()
    spec = load_spec(path, NodeManagerSpec, {"MOTOR_ADVERTISE_HOST": "10.1.2.3"})
    assert spec.advertise_host == "10.1.2.3"
    engine_flags = spec.engine.argv
    assert engine_flags[engine_flags.index("--engine-host") + 1] == "10.1.2.3"
    assert engine_flags[engine_flags.index("--host") + 1] == "10.1.2.3"
    assert spec.engine.env["VLLM_HOST_IP"] == "10.1.2.3"
    assert HOST_PLACEHOLDER not in spec.model_dump_json()


def test_a_kubernetes_spec_without_the_pod_address_is_refused(tmp_path: Path) -> None:
    path = kubernetes_spec_file(tmp_path, "controller")
    with pytest.raises(SpecError, match="MOTOR_ADVERTISE_HOST is not set"):
        load_spec(path, ControllerSpec, {})


def test_a_spec_of_another_component_is_refused_with_the_fix(tmp_path: Path) -> None:
    path = kubernetes_spec_file(tmp_path, "controller")
    with pytest.raises(SpecError, match=r"not a valid NodeManagerSpec .*regenerate it with `motor deploy`"):
        load_spec(path, NodeManagerSpec, {"MOTOR_ADVERTISE_HOST": "10.1.2.3"})


def test_a_missing_spec_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"cannot read spec .*missing\.spec\.json"):
        load_spec(tmp_path / "missing.spec.json", ControllerSpec)


def test_the_token_is_resolved_from_the_environment_only(tmp_path: Path) -> None:
    spec = load_spec(
        kubernetes_spec_file(tmp_path, "controller"), ControllerSpec, {"MOTOR_ADVERTISE_HOST": "h"}
    )
    assert spec.token.resolve({"MOTOR_CONTROLLER_TOKEN": "secret"}) == "secret"
    assert spec.token.resolve({}) == ""
