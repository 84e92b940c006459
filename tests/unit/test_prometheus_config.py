"""Prometheus scrape config from the plan: targets and labels per component, and files promtool accepts."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from motor.cli.main import main
from motor.config import Topology
from motor.deploy.plan import Plan, build_plan
from motor.deploy.prometheus import (
    CONFIG_FILE,
    RULES_FILE,
    TARGETS_FILE,
    WATERMARK_RECORD,
    metrics_endpoints,
    prometheus_config,
    prometheus_files,
    target_groups,
)
from tests.installs import needs_install
from tests.unit.test_plan import sim_topology

PROMTOOL = shutil.which("promtool")
needs_promtool = needs_install(
    PROMTOOL is not None,
    "promtool (Debian's prometheus package) is not installed: scripts/setup_dev.sh installs it",
)


def local_plan(pool: bool = True) -> tuple[Topology, Plan]:
    topology = sim_topology(pool=pool)
    return topology, build_plan(topology, config_dir="/run/simjob/config", run_dir="/run/simjob")


def test_every_component_is_a_target_with_job_instance_and_role_labels() -> None:
    _, plan = local_plan()
    groups = {(g["labels"]["job"], g["labels"]["instance"]): g for g in target_groups(plan)}
    assert set(groups) == {
        ("motor-kv-pool", "kv-pool"),
        ("motor-controller", "controller"),
        ("motor-coordinator", "coordinator"),
        *(
            (job, name)
            for name in ("prefill-0", "prefill-1", "decode-0")
            for job in ("motor-engine", "motor-node-manager")
        ),
    }
    coordinator = plan.component("coordinator")
    assert groups["motor-coordinator", "coordinator"] == {
        "targets": [f"127.0.0.1:{coordinator.ports['mgmt']}"],
        "labels": {"job": "motor-coordinator", "motor_job": "simjob", "instance": "coordinator"},
    }
    prefill = plan.component("prefill-1")
    assert groups["motor-engine", "prefill-1"]["targets"] == [f"127.0.0.1:{prefill.ports['engine']}"]
    assert groups["motor-node-manager", "prefill-1"]["targets"] == [f"127.0.0.1:{prefill.ports['nm']}"]
    assert groups["motor-engine", "prefill-1"]["labels"]["role"] == "prefill"
    pool = plan.component("kv-pool")
    assert groups["motor-kv-pool", "kv-pool"]["targets"] == [f"127.0.0.1:{pool.ports['metrics']}"]
    # the coordinator and controller export their own `role` label: their targets must not carry one
    for job in ("motor-coordinator", "motor-controller", "motor-kv-pool"):
        assert all("role" not in g["labels"] for key, g in groups.items() if key[0] == job)


def test_no_pool_no_pool_target_and_no_rule() -> None:
    topology, plan = local_plan(pool=False)
    assert "motor-kv-pool" not in {endpoint.job for endpoint in metrics_endpoints(plan)}
    rules = yaml.safe_load(prometheus_files(plan, topology.pool, "/p")[RULES_FILE])
    assert rules["groups"][0]["rules"] == []


def test_files_name_each_other_and_carry_the_watermark() -> None:
    topology, plan = local_plan()
    files = prometheus_files(plan, topology.pool, "/run/simjob/prometheus/")
    config = yaml.safe_load(files[CONFIG_FILE])
    assert config["rule_files"] == ["/run/simjob/prometheus/rules.yml"]
    assert config["scrape_configs"][0]["file_sd_configs"] == [
        {"files": ["/run/simjob/prometheus/targets.json"]}
    ]
    assert json.loads(files[TARGETS_FILE]) == target_groups(plan)
    [rule] = yaml.safe_load(files[RULES_FILE])["groups"][0]["rules"]
    assert topology.pool is not None
    assert rule == {
        "record": WATERMARK_RECORD,
        "expr": f"vector({topology.pool.eviction_high_watermark_ratio})",
        "labels": {"motor_job": "simjob"},
    }


@needs_promtool
def test_promtool_accepts_the_written_files(tmp_path: Path) -> None:
    topology, plan = local_plan()
    for name, text in prometheus_files(plan, topology.pool, str(tmp_path)).items():
        (tmp_path / name).write_text(text)
    checked = subprocess.run(
        [str(PROMTOOL), "check", "config", str(tmp_path / CONFIG_FILE)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout and "1 rules found" in checked.stdout


@needs_promtool
def test_promtool_accepts_the_inline_config(tmp_path: Path) -> None:
    _, plan = local_plan()
    path = tmp_path / "inline.yml"
    path.write_text(yaml.safe_dump(prometheus_config(plan, scrape_interval="1s")))
    checked = subprocess.run([str(PROMTOOL), "check", "config", str(path)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@needs_promtool
def test_cli_writes_files_promtool_accepts_and_prints_an_inline_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "sim"
    output = tmp_path / "prom"
    assert main(["prometheus-config", "--config-dir", str(example), "--output", str(output)]) == 0
    assert {p.name for p in output.iterdir()} == {CONFIG_FILE, TARGETS_FILE, RULES_FILE}
    checked = subprocess.run(
        [str(PROMTOOL), "check", "config", str(output / CONFIG_FILE)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    capsys.readouterr()
    assert main(["prometheus-config", "--config-dir", str(example)]) == 0
    inline = yaml.safe_load(capsys.readouterr().out)
    groups = inline["scrape_configs"][0]["static_configs"]
    assert {g["labels"]["instance"] for g in groups} == {
        "kv-pool",
        "controller",
        "coordinator",
        "prefill-0",
        "decode-0",
    }
    assert main(["prometheus-config"]) == 2
    assert main(["prometheus-config", "--job-id", "never-deployed", "--run-root", str(tmp_path)]) == 1
