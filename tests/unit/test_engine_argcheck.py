"""Engine command lines checked by the engines' own parsers: the sim's here (vLLM's in
tests/integration/test_engine_argcheck_vllm.py), the refusal mapped back to the engine_config key's JSON path."""

import dataclasses
import io
import json
import subprocess
import sys

import pytest

from motor.cli.engine_args import check_engine_args, engine_commands
from motor.deploy.plan import build_plan
from motor.engine.argcheck import RESULT, _sim, main, refusal
from tests.unit.test_plan import sim_topology


def test_the_sim_parser_takes_its_flags_and_names_what_it_refuses() -> None:
    check = _sim()
    assert refusal(check, ["--port", "0", "--itl-ms", "5"]) is None
    assert (
        refusal(check, ["--port", "0", "--no-such-flag", "1"]) == "unrecognized arguments: --no-such-flag 1"
    )
    assert "--max-model-len" in (refusal(check, ["--max-model-len", "many"]) or "")


def test_the_module_answers_on_its_last_stdout_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "motor.engine.argcheck", "motor.engine.sim"],
        input=json.dumps([["--port", "0"], ["--bogus"]]),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    last = done.stdout.splitlines()[-1]
    assert last.startswith(RESULT)
    assert json.loads(last[len(RESULT) :]) == [None, "unrecognized arguments: --bogus"]


def test_an_unknown_module_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("[]"))
    assert main(["not.an.engine"]) == 2


def _with_key(key: str, value: object):
    topology = sim_topology("local")
    roles = dict(topology.roles)
    prefill = roles["prefill"]
    roles["prefill"] = dataclasses.replace(prefill, engine_config={**prefill.engine_config, key: value})
    return dataclasses.replace(topology, roles=roles)


def test_a_key_the_sim_refuses_is_a_problem_at_its_json_path() -> None:
    topology = _with_key("not_a_sim_flag", 3)
    plan = build_plan(topology, config_dir="/c", run_dir="/r")
    assert {c.role: c.module for c in engine_commands(plan)} == {
        "prefill": "motor.engine.sim",
        "decode": "motor.engine.sim",
    }
    checked = check_engine_args(topology, plan)
    assert checked.notes == []
    (issue,) = checked.issues
    assert issue.path == f"{topology.roles['prefill'].section_path}.engine_config.not_a_sim_flag"
    assert "unrecognized arguments: --not-a-sim-flag 3" in issue.message


def test_the_sims_own_flags_pass() -> None:
    topology = _with_key("itl_ms", 7)
    assert check_engine_args(topology, build_plan(topology, config_dir="/c", run_dir="/r")).issues == []
