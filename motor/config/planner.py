"""The planner's section checked against the topology, and its bounds resolved once (pure).

`motor_planner_config` (motor's own section, docs/planner.md) bounds each role and the total: `planner_bounds`
turns it into `PlannerBounds`, what the planner's spec carries: the least and the most instances of each role
(a role without its own maximum is bounded by the budget less the other role's minimum, and by 16, the most
instances a config may give a role), the budgets, and what one instance of each role costs in accelerators.
`check_planner` reports every way the section and the rest of the config disagree, each at its path with the
fix.
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict

from motor.config.errors import ConfigIssue
from motor.config.models import PlannerConfig, UserConfig

PlannedRole = Literal["prefill", "decode"]
PLANNED_ROLES: tuple[PlannedRole, PlannedRole] = ("prefill", "decode")
SECTION = "motor_planner_config"
MOST_PER_ROLE = 16  # what p_instances_num / d_instances_num accept
COUNT_KEYS: dict[PlannedRole, str] = {"prefill": "p_instances_num", "decode": "d_instances_num"}


class PlannerBounds(BaseModel):
    """Within what the planner sizes the roles: `minimum`/`maximum` instances per role, `max_instances` in all
    (None: no instance budget), `max_accelerators` in all (None: none), `accelerators` one instance of the role
    takes (its pods × accelerators per pod)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    minimum: dict[PlannedRole, int]
    maximum: dict[PlannedRole, int]
    max_instances: int | None = None
    max_accelerators: int | None = None
    accelerators: dict[PlannedRole, int]

    def cost(self, counts: dict[PlannedRole, int]) -> int:
        return sum(self.accelerators[role] * counts[role] for role in PLANNED_ROLES)

    def within_budget(self, counts: dict[PlannedRole, int]) -> bool:
        total = sum(counts.values())
        if self.max_instances is not None and total > self.max_instances:
            return False
        return self.max_accelerators is None or self.cost(counts) <= self.max_accelerators


def instance_accelerators(user: UserConfig) -> dict[PlannedRole, int]:
    deploy = user.motor_deploy_config
    return {
        "prefill": deploy.single_p_instance_pod_num * deploy.p_pod_npu_num,
        "decode": deploy.single_d_instance_pod_num * deploy.d_pod_npu_num,
    }


def planner_bounds(config: PlannerConfig, accelerators: dict[PlannedRole, int]) -> PlannerBounds:
    minimum: dict[PlannedRole, int] = {"prefill": config.min_prefill, "decode": config.min_decode}
    given: dict[PlannedRole, int | None] = {"prefill": config.max_prefill, "decode": config.max_decode}
    maximum: dict[PlannedRole, int] = {}
    for role, other in (("prefill", "decode"), ("decode", "prefill")):
        limits = [MOST_PER_ROLE]
        if given[role] is not None:
            limits.append(given[role])  # type: ignore[arg-type]
        if config.max_instances is not None:
            limits.append(config.max_instances - minimum[other])  # type: ignore[index]
        if config.max_accelerators is not None and accelerators[role] > 0:
            spare = config.max_accelerators - minimum[other] * accelerators[other]  # type: ignore[index]
            limits.append(spare // accelerators[role])
        maximum[role] = min(limits)  # type: ignore[index]
    return PlannerBounds(
        minimum=minimum,
        maximum=maximum,
        max_instances=config.max_instances,
        max_accelerators=config.max_accelerators,
        accelerators=accelerators,
    )


def check_planner(user: UserConfig, aggregated: bool, issues: list[ConfigIssue]) -> None:
    """Add what keeps the planner from running this topology (nothing when it is off)."""
    config = user.motor_planner_config
    if not config.enable:
        return
    deploy = user.motor_deploy_config
    if aggregated:
        issues.append(
            ConfigIssue(
                f"{SECTION}.enable",
                "the planner sizes prefill and decode instances; an aggregated (union) deployment has none: "
                "deploy prefill and decode (p_instances_num, d_instances_num) or set enable to false",
            )
        )
        return
    if deploy.deploy_mode == "single_container":
        issues.append(
            ConfigIssue(
                f"{SECTION}.enable",
                "scaling a single_container deployment restarts its one pod with every instance in it; the "
                "planner needs multi_deployment (or local): change deploy_mode or set enable to false",
            )
        )
    accelerators = instance_accelerators(user)
    if config.max_instances is None and config.max_accelerators is None:
        issues.append(
            ConfigIssue(
                f"{SECTION}.max_instances",
                "the planner needs a budget: set max_instances (prefill + decode instances at most) or "
                "max_accelerators",
            )
        )
        return
    if config.max_accelerators is not None and not all(accelerators.values()):
        issues.append(
            ConfigIssue(
                f"{SECTION}.max_accelerators",
                "an accelerator budget needs accelerators per instance, but p_pod_npu_num or d_pod_npu_num is "
                "0: set max_instances instead",
            )
        )
        return
    bounds = planner_bounds(config, accelerators)
    for role in PLANNED_ROLES:
        if bounds.minimum[role] > bounds.maximum[role]:
            issues.append(
                ConfigIssue(
                    f"{SECTION}.min_{role}",
                    f"{bounds.minimum[role]} is above the most {role} instances the planner may run "
                    f"({bounds.maximum[role]}: max_{role} and the budget less the other role's minimum)"
                    "; lower it or raise the bounds",
                )
            )
            continue
        count = getattr(deploy, COUNT_KEYS[role])
        if count is not None and not bounds.minimum[role] <= count <= bounds.maximum[role]:
            issues.append(
                ConfigIssue(
                    f"motor_deploy_config.{COUNT_KEYS[role]}",
                    f"{count} is outside the planner's {role} bounds {bounds.minimum[role]}..."
                    f"{bounds.maximum[role]} ({SECTION}.min_{role}, max_{role} and the budget); "
                    "start within them",
                )
            )
    counts = {role: getattr(deploy, COUNT_KEYS[role]) for role in PLANNED_ROLES}
    if all(count is not None for count in counts.values()) and not bounds.within_budget(counts):
        budget = "max_instances" if config.max_instances is not None else "max_accelerators"
        issues.append(
            ConfigIssue(
                f"{SECTION}.{budget}",
                f"the deployed counts ({counts['prefill']} prefill + {counts['decode']} decode) exceed the "
                "budget; raise it or deploy fewer instances",
            )
        )
