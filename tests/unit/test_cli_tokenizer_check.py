"""`motor validate` of a local kv_cache_affinity job looks for the engines' tokenizer where the coordinator will load
it: a model directory without tokenizer files is refused at the option's JSON path; one without a chat template,
or an engine chat template the coordinator does not use, is a note (motor/cli/tokenizer_check.py)."""

import json
from pathlib import Path
from typing import Any

import pytest

from motor.cli.main import main

VLLM_ENGINE = {
    "engine_type": "vllm",
    "engine_config": {"served_model_name": "tiny", "block_size": 32},
}


def write_config(
    directory: Path, engine_config: dict[str, Any], scheduler: str = "kv_cache_affinity"
) -> Path:
    user = {
        "version": "v2.0",
        "motor_deploy_config": {"hybrid_instances_num": 1, "deploy_mode": "local", "job_id": "tok"},
        "motor_coordinator_config": {"scheduler_config": {"scheduler_type": scheduler}},
        "motor_engine_union_config": {
            **VLLM_ENGINE,
            "engine_config": {**VLLM_ENGINE["engine_config"], **engine_config},
        },
    }
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "user_config.json").write_text(json.dumps(user))
    (directory / "env.json").write_text(json.dumps({"version": "2.0.0"}))
    return directory


def model_dir(path: Path, *, tokenizer: bool = True, template: bool = True) -> Path:
    path.mkdir(parents=True)
    if tokenizer:
        (path / "tokenizer.json").write_text("{}")
    config = {"chat_template": "{{ messages }}"} if template else {}
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    return path


@pytest.fixture(autouse=True)
def no_engine_parsers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The engines' own argument parsers are another check's (motor/cli/engine_args.py)."""
    monkeypatch.setattr("motor.cli.validate.checked_engine_args", lambda _topology, _plan: None)
    monkeypatch.setenv("MOTOR_RUN_ROOT", str(tmp_path / "runs"))


def test_a_model_directory_without_tokenizer_files_is_refused_at_its_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = model_dir(tmp_path / "m", tokenizer=False)
    assert main(["validate", "--config-dir", str(write_config(tmp_path / "c", {"model": str(model)}))]) == 2
    err = capsys.readouterr().err
    assert "motor_engine_union_config.engine_config.model: scheduler_type kv_cache_affinity" in err
    assert "no tokenizer file" in err

    # the engine's own `tokenizer` option is where the coordinator looks then
    tokenizer = model_dir(tmp_path / "t")
    config = write_config(tmp_path / "c2", {"model": str(model), "tokenizer": str(tokenizer)})
    assert main(["validate", "--config-dir", str(config)]) == 0
    config = write_config(tmp_path / "c3", {"model": str(model), "tokenizer": str(tmp_path / "missing")})
    assert main(["validate", "--config-dir", str(config)]) == 2
    assert "motor_engine_union_config.engine_config.tokenizer:" in capsys.readouterr().err


def test_chat_templates_the_coordinator_will_not_use_are_notes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bare = model_dir(tmp_path / "bare", template=False)
    assert main(["validate", "--config-dir", str(write_config(tmp_path / "c", {"model": str(bare)}))]) == 0
    assert "has no chat template: the engines refuse chat requests" in capsys.readouterr().err

    model = model_dir(tmp_path / "m")
    config = write_config(tmp_path / "c2", {"model": str(model), "chat_template": "/t.jinja"})
    assert main(["validate", "--config-dir", str(config)]) == 0
    assert (
        "engine_config.chat_template: the coordinator renders chat requests with" in capsys.readouterr().err
    )
    assert main(["validate", "--config-dir", str(write_config(tmp_path / "c3", {"model": str(model)}))]) == 0
    assert "note:" not in capsys.readouterr().err


def test_other_policies_never_look(tmp_path: Path) -> None:
    config = write_config(tmp_path / "c", {"model": str(tmp_path / "missing")}, scheduler="load_balance")
    assert main(["validate", "--config-dir", str(config)]) == 0
