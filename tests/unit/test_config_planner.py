"""motor_planner_config: its defaults, its bounds resolved once, and every disagreement with the rest of the
config reported at its path with the fix (docs/planner.md#config)."""

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from motor.config import load_documents
from motor.config.models import PlannerConfig
from motor.config.planner import planner_bounds
from tests.unit.config_cases import aggregated, issues_of

SIM_DIR = Path(__file__).resolve().parents[2] / "examples" / "sim"


def sim(planner: dict[str, Any], **deploy: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    user = json.loads((SIM_DIR / "user_config.json").read_text())
    user["motor_planner_config"] = planner
    user["motor_deploy_config"].update(deploy)
    return user, json.loads((SIM_DIR / "env.json").read_text())


def test_off_by_default_and_then_nothing_is_checked() -> None:
    config = PlannerConfig()
    assert config.enable is False and config.max_instances is None
    user, env = sim({"max_instances": 1})  # out of range budgets are still schema errors
    assert "motor_planner_config.max_instances" in issues_of(user, env)
    user, env = sim({"min_prefill": 9})  # but bounds are only compared when the planner runs
    assert load_documents(user, env).user.motor_planner_config.min_prefill == 9


def test_an_enabled_planner_on_the_sim_example_validates_and_its_ports_are_checked() -> None:
    topology = load_documents(*sim({"enable": True, "max_instances": 8}))
    ports = {use.component: use.port for use in topology.ports}
    assert ports["planner"] == 1028
    assert "node manager prefill-6" in ports  # the most prefill instances it may run: 8 less 1 decode


@pytest.mark.parametrize(
    ("planner", "deploy", "path", "words"),
    [
        ({"enable": True}, {}, "motor_planner_config.max_instances", "needs a budget"),
        (
            {"enable": True, "max_instances": 3, "min_prefill": 3},
            {},
            "motor_planner_config.min_prefill",
            "above the most prefill instances the planner may run (2",
        ),
        (
            {"enable": True, "max_instances": 6, "max_decode": 2},
            {"d_instances_num": 3},
            "motor_deploy_config.d_instances_num",
            "outside the planner's decode bounds 1...2",
        ),
        (
            {"enable": True, "max_instances": 4, "max_prefill": 3, "max_decode": 3},
            {"p_instances_num": 3, "d_instances_num": 2},
            "motor_planner_config.max_instances",
            "(3 prefill + 2 decode) exceed the budget",
        ),
        (
            {"enable": True, "max_accelerators": 8},
            {},
            "motor_planner_config.max_accelerators",
            "p_pod_npu_num or d_pod_npu_num is 0",
        ),
        (
            {"enable": True, "max_instances": 12},
            {},
            "motor_nodemanger_config.api_config.node_manager_port",
            "already used by engine prefill-0",
        ),
    ],
)
def test_each_disagreement_is_named_at_its_path(
    planner: dict[str, Any], deploy: dict[str, Any], path: str, words: str
) -> None:
    issues = issues_of(*sim(planner, **deploy))
    assert words in issues[path], issues


def test_union_instances_are_refused() -> None:
    user, env = aggregated()
    user["motor_planner_config"] = {"enable": True, "max_instances": 4}
    assert "aggregated (union) deployment" in issues_of(user, env)["motor_planner_config.enable"]


def test_single_container_is_refused() -> None:
    user, env = sim({"enable": True, "max_instances": 4}, deploy_mode="single_container", image_name="m:1")
    assert "restarts its one pod" in issues_of(user, env)["motor_planner_config.enable"]


@pytest.mark.parametrize(
    ("config", "accelerators", "minimum", "maximum"),
    [
        ({"max_instances": 8}, {"prefill": 0, "decode": 0}, (1, 1), (7, 7)),
        (
            {"max_instances": 8, "min_decode": 2, "max_prefill": 4},
            {"prefill": 0, "decode": 0},
            (1, 2),
            (4, 7),
        ),
        ({"max_instances": 32}, {"prefill": 0, "decode": 0}, (1, 1), (16, 16)),
        ({"max_accelerators": 16}, {"prefill": 2, "decode": 4}, (1, 1), (6, 3)),
        ({"max_accelerators": 16, "max_instances": 4}, {"prefill": 2, "decode": 4}, (1, 1), (3, 3)),
    ],
)
def test_bounds_resolve_the_budget_into_each_role(
    config: dict[str, Any],
    accelerators: dict[str, int],
    minimum: tuple[int, int],
    maximum: tuple[int, int],
) -> None:
    bounds = planner_bounds(PlannerConfig(enable=True, **config), copy.deepcopy(accelerators))  # type: ignore[arg-type]
    assert (bounds.minimum["prefill"], bounds.minimum["decode"]) == minimum
    assert (bounds.maximum["prefill"], bounds.maximum["decode"]) == maximum
    assert bounds.within_budget({"prefill": minimum[0], "decode": minimum[1]})


def test_every_split_the_planner_may_reach_validates() -> None:
    """Its scale path validates the config with the new counts: the port check of the most instances must hold
    for every split within the budget, not only for the one deployed."""
    for prefill in range(1, 8):
        for decode in range(1, 9 - prefill):
            load_documents(
                *sim({"enable": True, "max_instances": 8}, p_instances_num=prefill, d_instances_num=decode)
            )
