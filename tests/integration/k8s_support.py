"""Config pairs for the Kubernetes backend tests: the seed example and GPU-free sim configs written to tmp dirs."""

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.fixtures.control import as_union

REPO = Path(__file__).resolve().parents[2]
SEED_DIR = REPO / "examples" / "infer_engines" / "vllm"


def example_dirs() -> list[Path]:
    """Every example directory holding a config pair (the seed, examples/local, examples/sim once they exist)."""
    return sorted(
        path.parent
        for path in (REPO / "examples").rglob("user_config.json")
        if (path.parent / "env.json").is_file()
    )


def copy_seed(target: Path) -> Path:
    target.mkdir(parents=True, exist_ok=True)
    for name in ("user_config.json", "env.json"):
        shutil.copy(SEED_DIR / name, target / name)
    return target


def sim_user_config(
    deploy_mode: str = "multi_deployment",
    *,
    hardware_type: str = "cpu",
    prefill: int = 2,
    decode: int = 1,
    pods: int = 1,
    accelerators: int = 0,
    pool: bool = True,
) -> dict[str, Any]:
    engine = {
        "engine_type": "sim",
        "engine_config": {
            "served_model_name": "sim",
            "kv_transfer_config": {"kv_connector": "MooncakeConnectorV1"},
        },
    }
    user: dict[str, Any] = {
        "version": "v2.0",
        "motor_deploy_config": {
            "p_instances_num": prefill,
            "d_instances_num": decode,
            "single_p_instance_pod_num": pods,
            "single_d_instance_pod_num": pods,
            "p_pod_npu_num": accelerators,
            "d_pod_npu_num": accelerators,
            "image_name": "motor:test",
            "job_id": "simjob",
            "hardware_type": hardware_type,
            "weight_mount_path": "/models",
            "deploy_mode": deploy_mode,
        },
        "motor_coordinator_config": {"logging_config": {"log_level": "INFO"}},
        "motor_engine_prefill_config": engine,
        "motor_engine_decode_config": engine,
    }
    if pool:
        user["kv_cache_pool_config"] = {"protocol": "tcp", "global_segment_size": "64MB"}
    return user


def sim_epd_config(deploy_mode: str = "multi_deployment", encodes: int = 2) -> dict[str, Any]:
    """sim_user_config with `encodes` encode instances handing their output to prefill through shared storage."""
    user = sim_user_config(deploy_mode)
    user["motor_deploy_config"].update(e_instances_num=encodes, e_pod_npu_num=0)
    ec = {
        "ec_connector": "ECExampleConnector",
        "ec_connector_extra_config": {"shared_storage_path": "/shared/ec"},
    }
    user["motor_engine_encode_config"] = {
        "engine_type": "sim",
        "engine_config": {"served_model_name": "sim", "ec_transfer_config": ec},
    }
    return user


def sim_union_config(deploy_mode: str = "multi_deployment", instances: int = 2) -> dict[str, Any]:
    engine = {"engine_type": "sim", "engine_config": {"served_model_name": "sim"}}
    return as_union(sim_user_config(deploy_mode, pool=False), instances, engine)


SIM_ENV: dict[str, Any] = {
    "version": "2.0.0",
    "motor_common_env": {"MOTOR_LOG_LEVEL": "INFO"},
    "motor_engine_prefill_env": {"SIM_TTFT_MS": "5"},
    "motor_engine_decode_env": {"SIM_TTFT_MS": "5"},
}


def write_config(target: Path, user: dict[str, Any], env: dict[str, Any] | None = None) -> Path:
    target.mkdir(parents=True, exist_ok=True)
    (target / "user_config.json").write_text(json.dumps(user, indent=2) + "\n")
    (target / "env.json").write_text(json.dumps(env if env is not None else SIM_ENV, indent=2) + "\n")
    return target


def edit_user_config(config_dir: Path, change: Callable[[dict[str, Any]], None]) -> None:
    path = config_dir / "user_config.json"
    document = json.loads(path.read_text())
    change(document)
    path.write_text(json.dumps(document, indent=2) + "\n")
