"""With tracer_config.endpoint set, the plan launches every vLLM and sim engine with --otlp-traces-endpoint (the
coordinator's endpoint, unless the engine section names its own); without it, no engine gets the flag."""

import dataclasses

import pytest

from motor.deploy.plan import build_plan
from motor.engine.sim.cli import parse_config
from tests.unit.test_plan import sim_topology

ENDPOINT = "http://127.0.0.1:4317"


def _topology(engine_type: str, endpoint: str, own: str | None = None):
    topology = sim_topology("local")
    extra = {"otlp-traces-endpoint": own} if own else {}
    roles = {
        role: dataclasses.replace(
            spec,
            engine_type=engine_type,
            engine_config={**spec.engine_config, "model": "/models/tiny", **extra},
        )
        for role, spec in topology.roles.items()
    }
    user = topology.user
    coordinator = user.motor_coordinator_config
    tracer = coordinator.tracer_config.model_copy(update={"endpoint": endpoint})
    user = user.model_copy(
        update={"motor_coordinator_config": coordinator.model_copy(update={"tracer_config": tracer})}
    )
    return dataclasses.replace(topology, roles=roles, user=user)


def _argvs(topology) -> list[list[str]]:
    plan = build_plan(topology, config_dir="/c", run_dir="/r", python="/venv/bin/python")
    return [c.spec.engine.argv for c in plan.components if c.kind == "node_manager"]


@pytest.mark.parametrize("engine_type", ["vllm", "sim"])
def test_engines_export_where_the_coordinator_does(engine_type: str) -> None:
    argvs = _argvs(_topology(engine_type, ENDPOINT))
    assert argvs
    for argv in argvs:
        assert argv[argv.index("--otlp-traces-endpoint") + 1] == ENDPOINT
    if engine_type == "sim":  # the simulator's own parser takes the command motor renders
        for argv in argvs:
            engine_args = argv[argv.index("motor.engine.sim") + 1 :]
            assert parse_config(engine_args).otlp_traces_endpoint == ENDPOINT


def test_no_endpoint_no_flag_and_an_engines_own_endpoint_wins() -> None:
    assert not any("--otlp-traces-endpoint" in argv for argv in _argvs(_topology("vllm", "")))
    for argv in _argvs(_topology("vllm", ENDPOINT, own="http://collector:4317")):
        assert argv[argv.index("--otlp-traces-endpoint") + 1] == "http://collector:4317"
        assert argv.count("--otlp-traces-endpoint") == 1
