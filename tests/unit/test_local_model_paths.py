from pathlib import Path

from motor.deploy.local.deploy import _absolute_model_paths


def test_relative_model_paths_that_exist_become_absolute(tmp_path: Path) -> None:
    (tmp_path / "models" / "tiny").mkdir(parents=True)
    user = {
        "motor_engine_prefill_config": {
            "engine_config": {"model": "models/tiny", "tokenizer": "models/tiny"}
        },
        "motor_engine_decode_config": {"engine_config": {"model": "Qwen/Qwen3-8B"}},
        "motor_engine_union_config": {"engine_config": {"model": "/abs/path"}},
    }
    _absolute_model_paths(user, tmp_path)
    prefill = user["motor_engine_prefill_config"]["engine_config"]
    assert prefill["model"] == str(tmp_path / "models" / "tiny")
    assert prefill["tokenizer"] == str(tmp_path / "models" / "tiny")
    assert user["motor_engine_decode_config"]["engine_config"]["model"] == "Qwen/Qwen3-8B"
    assert user["motor_engine_union_config"]["engine_config"]["model"] == "/abs/path"
