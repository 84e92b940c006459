"""The engine-type registry: every engine_type the config accepts is registered once, an unknown one is an error
naming its path, and each type builds its command from the one EngineLaunchRequest it is given."""

import json
from pathlib import Path
from typing import Any, get_args

import pytest

from motor.config.models import EngineType as ConfigEngineType
from motor.config.models import NodeManagerConfig
from motor.config.topology import RoleSpec
from motor.deploy.engines import (
    REGISTRY,
    DuplicateEngineError,
    EngineLaunchRequest,
    EngineType,
    LaunchError,
    engine_spec,
    known_engine_types,
    lookup,
    register,
)
from motor.protocol.env import STORE_CONFIG_PATH
from motor.protocol.specs import EngineSpec

# engine_type -> the module its engine runs under `python -m`, and the option naming its weights
MODULES = {
    "vllm": ("vllm.entrypoints.openai.api_server", "model"),
    "sim": ("motor.engine.sim", "model"),
    "sglang": ("sglang.launch_server", "model-path"),
}


def role_spec(engine_type: str, engine_config: dict[str, Any], role: str = "prefill") -> RoleSpec:
    return RoleSpec(
        role=role,  # type: ignore[arg-type]
        section_path=f"motor_engine_{role}_config",
        instances=1,
        pods_per_instance=1,
        accelerators_per_pod=0,
        engine_type=engine_type,
        engine_config=engine_config,
        env={"FROM_ENV_JSON": "1"},
        node_manager=NodeManagerConfig(),
    )


def request(spec: RoleSpec, run_dir: Path, **changes: Any) -> EngineLaunchRequest:
    fields: dict[str, Any] = {
        "instance_id": "prefill-3",
        "host": "10.1.2.3",
        "port": 7100,
        "status_port": 7101,
        "run_dir": str(run_dir),
        "python": "/venv/bin/python",
        **changes,
    }
    return EngineLaunchRequest(spec, **fields)


def test_every_engine_type_the_config_accepts_is_registered() -> None:
    assert sorted(known_engine_types()) == sorted(get_args(ConfigEngineType)) == sorted(MODULES)
    assert all(engine.name == name for name, engine in REGISTRY.items())


def test_an_unknown_engine_type_is_an_error_naming_its_path_and_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(LaunchError) as caught:
        engine_spec(request(role_spec("trt", {"model": "/m"}), tmp_path))
    assert caught.value.path == "motor_engine_prefill_config.engine_type"
    assert caught.value.message == "unknown engine type 'trt'; use one of vllm, sim, sglang"
    assert lookup("trt") is None


def test_registering_a_name_twice_is_refused() -> None:
    before = dict(REGISTRY)
    with pytest.raises(DuplicateEngineError, match="'vllm' is registered twice"):
        register(EngineType("vllm", model_option="model", launch=REGISTRY["vllm"].launch))
    assert before == REGISTRY


@pytest.mark.parametrize("engine_type", sorted(MODULES))
def test_each_type_builds_its_command_from_the_request(engine_type: str, tmp_path: Path) -> None:
    module, model_option = MODULES[engine_type]
    spec = role_spec(engine_type, {model_option: "/models/tiny", "served_model_name": "tiny"}, role="decode")
    launch = engine_spec(request(spec, tmp_path / "run"))
    split = launch.argv.index("--")
    wrapper, engine = launch.argv[:split], launch.argv[split + 1 :]
    assert wrapper == [
        "/venv/bin/python",
        "-m",
        "motor.engine.server",
        "--engine-host",
        "10.1.2.3",
        "--engine-port",
        "7100",
        "--status-host",
        "10.1.2.3",
        "--status-port",
        "7101",
    ]
    assert engine[:3] == ["/venv/bin/python", "-m", module]
    options = dict(zip(engine[3::2], engine[4::2], strict=True))
    assert options["--host"] == "10.1.2.3" and options["--port"] == "7100"
    assert options[f"--{model_option}"] == "/models/tiny"
    assert options["--served-model-name"] == "tiny"
    assert launch.engine_type == engine_type
    assert (launch.port, launch.status_port) == (7100, 7101)
    assert launch.log_path == str(tmp_path / "run" / "engine.log")
    assert launch.env["FROM_ENV_JSON"] == "1"


@pytest.mark.parametrize(
    "engine_type", sorted(name for name, engine in REGISTRY.items() if engine.needs_model)
)
def test_a_type_that_needs_weights_refuses_a_section_without_them(engine_type: str, tmp_path: Path) -> None:
    option = REGISTRY[engine_type].model_option
    with pytest.raises(LaunchError) as caught:
        engine_spec(request(role_spec(engine_type, {"served_model_name": "tiny"}), tmp_path))
    assert caught.value.path == f"motor_engine_prefill_config.engine_config.{option}"


def test_the_simulator_needs_no_weights_and_hands_engines_the_store_config(tmp_path: Path) -> None:
    transfer = {"kv_connector": "MooncakeConnectorV1", "kv_role": "kv_both"}
    spec = role_spec("sim", {"served_model_name": "sim", "kv_transfer_config": transfer})
    launch = engine_spec(request(spec, tmp_path, store_config={"protocol": "tcp"}))
    engine = launch.argv[launch.argv.index("--") + 1 :]
    assert "--model" not in engine
    kv = json.loads(engine[engine.index("--kv-transfer-config") + 1])
    assert kv["engine_id"] == "prefill-3"
    path = launch.env[STORE_CONFIG_PATH]
    assert path == str(tmp_path / "prefill-3.mooncake.json")
    assert json.loads(launch.files[path]) == {"protocol": "tcp"}


def test_engine_spec_hands_a_registered_type_the_request_as_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    received: list[EngineLaunchRequest] = []
    built = EngineSpec(
        engine_type="echo", argv=["echo"], env={}, files={}, port=1, status_port=2, log_path="l", pid_path="p"
    )

    def launch(given: EngineLaunchRequest) -> EngineSpec:
        received.append(given)
        return built

    monkeypatch.setitem(REGISTRY, "echo", EngineType("echo", model_option="model", launch=launch))
    sent = request(role_spec("echo", {}), tmp_path)
    assert engine_spec(sent) is built
    assert received == [sent]
