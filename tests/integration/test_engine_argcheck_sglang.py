"""SGLang's own argument parser (`ServerArgs.add_cli_args`, sglang 0.5.23) checks the SGLang commands motor
renders: pyMotor's SGLang configs (the compat corpus: engine_config flags, and v3.0.0's `model_config` shape) give
commands it takes for every role, and a key it does not know, or a value it refuses, is a problem at the key's
JSON path. pyMotor v3.0.0's example sets `prefill_round_robin_balance` on its decode engines, a flag SGLang took
until 0.5.12 and refuses since 0.5.20: that is what a pod of that config would fail on with this SGLang. SGLang itself does not run here (it needs an accelerator build of torch); scripts/setup_dev.sh installs
the package without its dependencies, which is all its parser needs."""

import json
from pathlib import Path
from typing import Any

from motor.cli.engine_args import check_engine_args, engine_commands
from motor.config import load_documents
from motor.deploy.plan import build_plan
from tests.installs import importable, needs_install

pytestmark = needs_install(
    importable("sglang"), "SGLang is not installed: scripts/setup_dev.sh installs its argument parser"
)

CORPUS = Path(__file__).resolve().parents[1] / "compat" / "corpus"


def _documents(case: str) -> tuple[dict[str, Any], dict[str, Any]]:
    return tuple(  # type: ignore[return-value]
        json.loads((CORPUS / case / name).read_text(encoding="utf-8"))
        for name in ("user_config.json", "env.json")
    )


def _check(user: dict[str, Any], env: dict[str, Any]):
    topology = load_documents(user, env)
    plan = build_plan(topology, config_dir="/c")
    return check_engine_args(topology, plan), plan


def test_sglangs_parser_takes_the_command_of_every_role() -> None:
    checked, plan = _check(*_documents("sglang-pd"))
    assert [c.module for c in engine_commands(plan)] == ["sglang.launch_server"] * 2
    assert checked.issues == [] and checked.notes == []


def test_pymotor_v3_sglang_example_only_trips_on_the_flag_newer_sglang_dropped() -> None:
    """The `model_config` shape (model path, served name, parallel sizes, dp_rpc_port) renders flags SGLang takes;
    the one refusal is the example's own engine_config key."""
    checked, plan = _check(*_documents("sglang-v3-model-config"))
    assert [c.module for c in engine_commands(plan)] == ["sglang.launch_server"] * 2
    (issue,) = checked.issues
    assert issue.path == "motor_engine_decode_config.engine_config.prefill_round_robin_balance", issue
    assert "unrecognized arguments: --prefill-round-robin-balance" in issue.message


def test_a_flag_sglang_does_not_know_is_a_problem_at_its_key() -> None:
    user, env = _documents("sglang-pd")
    user["motor_engine_prefill_config"]["engine_config"]["not-an-sglang-flag"] = 1
    (issue,) = _check(user, env)[0].issues
    assert issue.path == "motor_engine_prefill_config.engine_config.not-an-sglang-flag", issue
    assert "unrecognized arguments: --not-an-sglang-flag" in issue.message


def test_a_value_sglang_refuses_is_a_problem_at_its_key() -> None:
    user, env = _documents("sglang-pd")
    user["motor_engine_decode_config"]["engine_config"]["mem-fraction-static"] = "most"
    (issue,) = _check(user, env)[0].issues
    assert issue.path == "motor_engine_decode_config.engine_config.mem-fraction-static", issue
    assert "'most'" in issue.message
