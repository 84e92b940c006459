import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from motor.config import load_documents
from motor.config.models import NodeManagerConfig
from motor.config.topology import RoleSpec
from motor.deploy.engines import (
    EngineLaunchRequest,
    LaunchError,
    engine_spec,
    option_flags,
    served_model_name,
    with_engine_id,
)
from motor.protocol.env import STORE_CONFIG_PATH as STORE_CONFIG_ENV
from motor.protocol.specs import EngineSpec

BOOTSTRAP_PORT_ENV = "VLLM_MOONCAKE_BOOTSTRAP_PORT"  # where vLLM's MooncakeConnector reads its bootstrap port


def role_spec(
    engine_config: dict[str, Any], *, engine_type: str = "vllm", env: dict[str, str] | None = None
) -> RoleSpec:
    return RoleSpec(
        role="prefill",
        section_path="motor_engine_prefill_config",
        instances=1,
        pods_per_instance=1,
        accelerators_per_pod=0,
        engine_type=engine_type,
        engine_config=engine_config,
        env=env or {},
        node_manager=NodeManagerConfig(),
    )


def engine_part(argv: list[str]) -> list[str]:
    return argv[argv.index("--") + 1 :]


def flag_value(argv: list[str], flag: str) -> str:
    assert argv.count(flag) == 1, f"{flag} appears {argv.count(flag)} times in {argv}"
    return argv[argv.index(flag) + 1]


def launch_on_localhost(
    spec: RoleSpec,
    run_dir: Path,
    *,
    instance_id: str = "prefill-0",
    port: int = 1,
    status_port: int = 2,
    store_config: dict[str, Any] | None = None,
    **kwargs: Any,
) -> EngineSpec:
    return engine_spec(
        EngineLaunchRequest(
            spec,
            instance_id=instance_id,
            host="127.0.0.1",
            port=port,
            status_port=status_port,
            store_config=store_config,
            run_dir=str(run_dir),
            **kwargs,
        )
    )


def test_flag_rules() -> None:
    argv = option_flags(
        {
            "enforce_eager": True,
            "enable-expert-parallel": False,
            "quantization": None,
            "max_model_len": 512,
            "gpu_memory_utilization": 0.5,
            "dtype": "float32",
            "override_generation_config": {"temperature": 0},
            "allowed-origins": ["a", "b"],
            "api_key": [],
        }
    )
    assert argv == [
        "--enforce-eager",
        "--max-model-len",
        "512",
        "--gpu-memory-utilization",
        "0.5",
        "--dtype",
        "float32",
        "--override-generation-config",
        '{"temperature":0}',
        "--allowed-origins",
        "a",
        "b",
    ]


def test_unsupported_value_type_is_an_error() -> None:
    with pytest.raises(LaunchError, match=r"engine_config\.model: cannot pass a set"):
        option_flags({"model": {1, 2}})


def test_vllm_launch_injects_topology(tmp_path: Path) -> None:
    spec = role_spec(
        {
            "model": "/models/tiny",
            "served_model_name": "tiny",
            "host": "0.0.0.0",
            "port": 1,
            "enforce_eager": True,
            "kv_transfer_config": {"kv_connector": "ExampleConnector", "kv_role": "kv_producer"},
        },
        env={"PYTHONHASHSEED": "0"},
    )
    launch = launch_on_localhost(spec, tmp_path, port=9000, status_port=9001, python="/py")
    wrapper = launch.argv[: launch.argv.index("--")]
    assert wrapper[:3] == ["/py", "-m", "motor.engine.server"]
    assert flag_value(wrapper, "--engine-port") == "9000"
    assert flag_value(wrapper, "--status-port") == "9001"
    engine = engine_part(launch.argv)
    assert engine[:3] == ["/py", "-m", "vllm.entrypoints.openai.api_server"]
    assert flag_value(engine, "--host") == "127.0.0.1"
    assert flag_value(engine, "--port") == "9000"
    assert flag_value(engine, "--served-model-name") == "tiny"
    assert "--enforce-eager" in engine
    kv = json.loads(flag_value(engine, "--kv-transfer-config"))
    assert kv == {"kv_connector": "ExampleConnector", "kv_role": "kv_producer", "engine_id": "prefill-0"}
    assert launch.env["PYTHONHASHSEED"] == "0"
    assert STORE_CONFIG_ENV not in launch.env
    assert launch.files == {}


def test_multiconnector_engine_id_is_set_once_on_top() -> None:
    config = {
        "kv_connector": "MultiConnector",
        "kv_role": "kv_consumer",
        "kv_connector_extra_config": {
            "connectors": [
                {"kv_connector": "MooncakeConnector", "kv_role": "kv_consumer", "engine_id": "stale"},
                {"kv_connector": "MooncakeStoreConnector", "kv_role": "kv_consumer"},
            ]
        },
    }
    filled = with_engine_id(config, "decode-0")
    connectors = filled["kv_connector_extra_config"]["connectors"]
    assert filled["engine_id"] == "decode-0"
    assert all("engine_id" not in sub for sub in connectors), "sub-connectors inherit the top-level engine_id"
    assert "engine_id" not in config, "the spec's config must not be modified"


def test_store_config_file_and_env(tmp_path: Path) -> None:
    spec = role_spec({"model": "/m"})
    store = {"master_server_address": "127.0.0.1:50088", "protocol": "tcp", "global_segment_size": 1 << 28}
    launch = launch_on_localhost(
        spec, tmp_path, instance_id="decode-0", port=9002, status_port=9003, store_config=store
    )
    path = launch.env[STORE_CONFIG_ENV]
    assert Path(path).parent == tmp_path
    written = json.loads(launch.files[path])
    assert written == store


def test_every_served_name_is_passed(tmp_path: Path) -> None:
    launch = launch_for({"kv_connector": "ExampleConnector"}, tmp_path, names=["a", "b"])
    engine = engine_part(launch.argv)
    assert engine[engine.index("--served-model-name") + 1 : engine.index("--served-model-name") + 3] == [
        "a",
        "b",
    ]


def test_served_model_name_falls_back_to_model() -> None:
    assert served_model_name(role_spec({"model": "/models/tiny"})) == "/models/tiny"
    assert served_model_name(role_spec({"model": "/m", "served-model-name": ["a", "b"]})) == "a"


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        pytest.param(role_spec({"served_model_name": "x"}), r"engine_config\.model", id="vllm-needs-a-model"),
        pytest.param(
            role_spec({"model": "/m"}, engine_type="sglang"),
            r"engine_config\.model-path: required for a sglang engine",
            id="sglang-needs-a-model-path",
        ),
        pytest.param(
            role_spec({"model": "/m"}, engine_type="trt"), "unknown engine type 'trt'", id="unknown"
        ),
    ],
)
def test_unlaunchable_specs_are_errors(spec: RoleSpec, error: str, tmp_path: Path) -> None:
    with pytest.raises(LaunchError, match=error):
        launch_on_localhost(spec, tmp_path, instance_id="p")


def test_sglang_engines_get_their_disaggregation_mode_and_bootstrap_port(tmp_path: Path) -> None:
    config = {"model-path": "/models/q", "tp-size": 4}
    prefill = launch_on_localhost(role_spec(config, engine_type="sglang"), tmp_path, bootstrap_port=9100)
    engine = engine_part(prefill.argv)
    assert engine[:3] == [sys.executable, "-m", "sglang.launch_server"]
    assert flag_value(engine, "--disaggregation-mode") == "prefill"
    assert flag_value(engine, "--disaggregation-bootstrap-port") == "9100"
    assert flag_value(engine, "--model-path") == "/models/q"
    assert flag_value(engine, "--served-model-name") == "/models/q"
    assert prefill.bootstrap_port == 9100
    assert prefill.env["SGLANG_HOST_IP"] == "127.0.0.1"
    decode_spec = dataclasses.replace(role_spec(config, engine_type="sglang"), role="decode")
    decode = launch_on_localhost(decode_spec, tmp_path, instance_id="decode-0")
    assert flag_value(engine_part(decode.argv), "--disaggregation-mode") == "decode"
    assert decode.bootstrap_port is None
    with pytest.raises(LaunchError, match="SGLang takes no kv_transfer_config"):
        launch_on_localhost(
            role_spec({**config, "kv_transfer_config": {"kv_connector": "x"}}, engine_type="sglang"), tmp_path
        )


def test_kv_roles_come_from_the_topology(tmp_path: Path) -> None:
    transfer = {
        "kv_connector": "MultiConnector",
        "kv_connector_extra_config": {
            "connectors": [{"kv_connector": "ExampleConnector"}, {"kv_connector": "MooncakeStoreConnector"}]
        },
    }
    section = {"engine_type": "vllm", "engine_config": {"model": "/m", "kv_transfer_config": transfer}}
    topology = load_documents(
        {
            "version": "v2.0",
            "motor_deploy_config": {"p_instances_num": 1, "d_instances_num": 1},
            "motor_engine_prefill_config": section,
            "motor_engine_decode_config": section,
            "kv_cache_pool_config": {"protocol": "tcp"},
        },
        {"version": "2.0.0"},
    )
    for role, kv_role in (("prefill", "kv_producer"), ("decode", "kv_consumer")):
        launch = launch_on_localhost(topology.roles[role], tmp_path, instance_id=f"{role}-0", store_config={})
        kv = json.loads(flag_value(engine_part(launch.argv), "--kv-transfer-config"))
        assert kv["kv_role"] == kv_role
        assert [c["kv_role"] for c in kv["kv_connector_extra_config"]["connectors"]] == [kv_role, kv_role]
        assert launch.env["PYTHONHASHSEED"] == "0"


def mooncake_multi(role: str, **transfer: Any) -> dict[str, Any]:
    return {
        "kv_connector": "MultiConnector",
        "kv_role": role,
        "kv_connector_extra_config": {
            "connectors": [
                {"kv_connector": "MooncakeConnector", "kv_role": role, **transfer},
                {"kv_connector": "MooncakeStoreConnector", "kv_role": role},
            ]
        },
    }


def launch_for(
    config: dict[str, Any], tmp_path: Path, names: list[str] | None = None, **kwargs: Any
) -> EngineSpec:
    spec = role_spec({"model": "/m", "served_model_name": names, "kv_transfer_config": config})
    return launch_on_localhost(spec, tmp_path, **kwargs)


@pytest.mark.parametrize(
    ("kv_role", "bootstrap_port", "served"),
    [
        pytest.param("kv_producer", None, 18998, id="producer-serves-bootstrap-on-kv-port"),
        pytest.param("kv_producer", 20001, 20001, id="explicit-bootstrap-port-wins"),
        pytest.param("kv_consumer", 20001, None, id="consumer-serves-no-bootstrap"),
    ],
)
def test_bootstrap_port(tmp_path: Path, kv_role: str, bootstrap_port: int | None, served: int | None) -> None:
    launch = launch_for(mooncake_multi(kv_role, kv_port="18998"), tmp_path, bootstrap_port=bootstrap_port)
    assert launch.bootstrap_port == served
    # the consumer's environment has no bootstrap variable at all
    assert launch.env.get(BOOTSTRAP_PORT_ENV) == (None if served is None else str(served))


def test_producer_without_bootstrap_port_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(LaunchError, match="kv_port"):
        launch_for(mooncake_multi("kv_producer"), tmp_path)
