from pathlib import Path

from motor.config import load_documents
from motor.deploy.local.deploy import with_local_model_paths


def _engine(model: str, **extra: str) -> dict[str, object]:
    return {"engine_type": "sim", "engine_config": {"model": model, **extra}}


def test_relative_model_paths_that_exist_become_absolute(tmp_path: Path) -> None:
    (tmp_path / "models" / "tiny").mkdir(parents=True)
    topology = load_documents(
        {
            "version": "v2.0",
            "motor_deploy_config": {"p_instances_num": 1, "d_instances_num": 1, "deploy_mode": "local"},
            "motor_coordinator_config": {"scheduler_config": {"dispatch_profile": "prefill_first"}},
            "motor_engine_prefill_config": _engine("models/tiny", tokenizer="models/tiny"),
            "motor_engine_decode_config": _engine("models/tiny", tokenizer="org/tokenizer-on-a-hub"),
        },
        {"version": "2.0.0"},
    )
    resolved = with_local_model_paths(topology, tmp_path)
    prefill = resolved.roles["prefill"].engine_config
    assert prefill["model"] == str(tmp_path / "models" / "tiny")
    assert prefill["tokenizer"] == str(tmp_path / "models" / "tiny")
    assert resolved.roles["decode"].engine_config["tokenizer"] == "org/tokenizer-on-a-hub"
    assert topology.roles["prefill"].engine_config["model"] == "models/tiny"
