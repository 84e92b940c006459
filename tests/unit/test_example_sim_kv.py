"""examples/sim-kv is examples/sim routed by kv_cache_affinity: 2 simulated prefill engines publishing their KV
events, a coordinator with 2 workers that each index them and ask the pool, on ports of its own (it runs beside
examples/sim)."""

import json
from pathlib import Path

from motor.config import load_config
from motor.deploy.plan import build_plan

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXAMPLE = EXAMPLES / "sim-kv"


def test_examples_sim_kv_validates_and_plans_the_index_the_sim_engines_feed() -> None:
    topology = load_config(EXAMPLE / "user_config.json", EXAMPLE / "env.json")
    coordinator = topology.user.motor_coordinator_config
    assert coordinator.scheduler_config.scheduler_type == "kv_cache_affinity"
    # what docs/kv-routing.md recommends under cache pressure: a prefix is worth ten queued tokens per token
    assert coordinator.scheduler_config.kv_affinity.prefill_load_scale == 10.0
    assert coordinator.inference_workers_config.num_workers == 2
    assert {role: (spec.engine_type, spec.instances) for role, spec in topology.roles.items()} == {
        "prefill": ("sim", 2),
        "decode": ("sim", 1),
    }
    plan = build_plan(topology, config_dir="/c", run_dir="/r", python="/venv/bin/python")
    (spec,) = [c.spec for c in plan.components if c.kind == "coordinator"]
    index = spec.kv_index
    assert index is not None and index.pool is not None
    assert (index.block_size, index.hash_algorithm, index.hash_seed, index.engine_type) == (
        16,
        "sha256",
        "0",
        "sim",
    )
    assert index.pool.key_scheme == "motor-sim"
    publishing = {
        c.name: c.spec.engine.kv_events is not None for c in plan.components if c.kind == "node_manager"
    }
    assert publishing == {"prefill-0": True, "prefill-1": True, "decode-0": False}


def test_examples_sim_kv_runs_beside_examples_sim() -> None:
    ports = [load_config(d / "user_config.json", d / "env.json").ports for d in (EXAMPLES / "sim", EXAMPLE)]
    assert not {use.port for use in ports[0]} & {use.port for use in ports[1]}
    jobs = {
        json.loads((d / "user_config.json").read_text())["motor_deploy_config"]["job_id"]
        for d in (EXAMPLES / "sim", EXAMPLE)
    }
    assert len(jobs) == 2
