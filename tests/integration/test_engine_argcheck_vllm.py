"""vLLM's own argument parser checks the command motor renders for it: its flags pass, a key it does not know
or a value it refuses is a problem at the key's JSON path (what `motor validate` and a local `motor deploy`
report before anything starts)."""

import dataclasses

from motor.cli.engine_args import check_engine_args
from motor.deploy.plan import build_plan
from tests.installs import needs_vllm
from tests.unit.test_plan import sim_topology

pytestmark = needs_vllm


def _vllm_topology(**prefill_keys: object):
    topology = sim_topology("local")
    roles = {
        role: dataclasses.replace(
            spec,
            engine_type="vllm",
            engine_config={
                **spec.engine_config,
                "model": "/models/tiny",
                **(prefill_keys if role == "prefill" else {}),
            },
        )
        for role, spec in topology.roles.items()
    }
    return dataclasses.replace(topology, roles=roles)


def test_vllms_parser_takes_motors_command_and_names_the_keys_it_refuses() -> None:
    good = _vllm_topology(max_model_len=2048, enforce_eager=True)
    checked = check_engine_args(good, build_plan(good, config_dir="/c", run_dir="/r"))
    assert checked.issues == [] and checked.notes == []

    unknown = _vllm_topology(not_a_vllm_flag=1)
    (issue,) = check_engine_args(unknown, build_plan(unknown, config_dir="/c", run_dir="/r")).issues
    assert issue.path.endswith("motor_engine_prefill_config.engine_config.not_a_vllm_flag"), issue
    assert "unrecognized arguments: --not-a-vllm-flag" in issue.message

    refused_value = _vllm_topology(max_model_len="many")
    (issue,) = check_engine_args(
        refused_value, build_plan(refused_value, config_dir="/c", run_dir="/r")
    ).issues
    assert issue.path.endswith("motor_engine_prefill_config.engine_config.max_model_len"), issue
    assert "'many'" in issue.message
