"""The job file a local job supervisor runs: scaled plans keep the ordinals (so the ports and specs) of the
instances that stay, and a component's revision changes exactly when its command, environment or spec does."""

import json
from pathlib import Path
from typing import Any

import pytest

from motor.config import load_documents
from motor.config.ports import instance_ports
from motor.deploy.local.job import JobFile, job_from_plan, read_job, write_job
from motor.deploy.plan import build_plan

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sim"
RUN_DIR = Path("/run/motor-sim")


def sim_doc(prefill: int = 1, decode: int = 1) -> dict[str, Any]:
    doc = json.loads((EXAMPLE / "user_config.json").read_text())
    doc["motor_deploy_config"].update(p_instances_num=prefill, d_instances_num=decode)
    return doc


def job(doc: dict[str, Any], kept: dict[str, int] | None = None) -> JobFile:
    topology = load_documents(doc, json.loads((EXAMPLE / "env.json").read_text()))
    plan = build_plan(
        topology, target="local", config_dir=str(RUN_DIR / "config"), run_dir=str(RUN_DIR), kept_ordinals=kept
    )
    return job_from_plan(plan, RUN_DIR)


def revisions(job_file: JobFile) -> dict[str, str]:
    return {c.name: c.revision for c in job_file.components}


def ordinals(job_file: JobFile) -> dict[str, int | None]:
    return {c.name: c.ordinal for c in job_file.components if c.kind == "node_manager"}


def test_new_instances_take_the_free_ordinals_and_kept_ones_keep_theirs() -> None:
    topology = load_documents(sim_doc(2, 2), json.loads((EXAMPLE / "env.json").read_text()))
    default = {p.name: p.ordinal for p in instance_ports(topology.roles)}
    assert default == {"prefill-0": 0, "prefill-1": 1, "decode-0": 2, "decode-1": 3}
    kept = {p.name: p.ordinal for p in instance_ports(topology.roles, {"prefill-0": 0, "decode-0": 1})}
    assert kept == {"prefill-0": 0, "prefill-1": 2, "decode-0": 1, "decode-1": 3}
    gone = {p.name: p.ordinal for p in instance_ports(topology.roles, {"decode-0": 1, "union-0": 0})}
    assert gone == {"prefill-0": 0, "prefill-1": 2, "decode-0": 1, "decode-1": 3}  # unknown names ignored
    with pytest.raises(ValueError, match="same ordinal"):
        instance_ports(topology.roles, {"prefill-0": 1, "decode-0": 1})


def test_scaling_up_and_back_leaves_the_running_components_as_they_are() -> None:
    small = job(sim_doc())
    assert ordinals(small) == {"prefill-0": 0, "decode-0": 1}
    large = job(sim_doc(2, 2), kept=ordinals(small))  # type: ignore[arg-type]
    assert ordinals(large) == {"prefill-0": 0, "prefill-1": 2, "decode-0": 1, "decode-1": 3}
    assert {name: revisions(large)[name] for name in revisions(small)} == revisions(small)
    back = job(sim_doc(), kept=ordinals(large))  # type: ignore[arg-type]
    assert revisions(back) == revisions(small)
    # without the kept ordinals decode-0 would move to other ports: a restart for nothing
    moved = job(sim_doc(2, 2))
    assert moved.component("decode-0").ports != small.component("decode-0").ports  # type: ignore[union-attr]
    assert revisions(moved)["decode-0"] != revisions(small)["decode-0"]


def test_a_config_change_changes_the_revisions_of_the_components_that_read_it() -> None:
    base = revisions(job(sim_doc()))
    timeout = sim_doc()
    timeout["motor_coordinator_config"]["exception_config"]["first_token_timeout"] = 61
    assert [name for name, rev in revisions(job(timeout)).items() if base[name] != rev] == ["coordinator"]
    level = sim_doc()
    level["motor_nodemanger_config"]["logging_config"]["log_level"] = "DEBUG"
    assert [name for name, rev in revisions(job(level)).items() if base[name] != rev] == [
        "prefill-0",
        "decode-0",
    ]


def test_the_job_file_round_trips_and_is_private(tmp_path: Path) -> None:
    written = job(sim_doc())
    write_job(tmp_path, written)
    assert read_job(tmp_path) == written
    assert (tmp_path / "job.json").stat().st_mode & 0o777 == 0o600
    pool = written.component("kv-pool")
    assert (
        pool is not None
        and pool.liveness_url.endswith("/health")
        and pool.argv[0].endswith("mooncake_master")
    )
    controller = written.component("controller")
    assert controller is not None and controller.startup_url.endswith("/startup")
    assert controller.log == str(RUN_DIR / "logs" / "controller.log")
    assert controller.run_dir == str(RUN_DIR / "controller")
