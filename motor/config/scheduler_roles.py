"""MindIE Motor's per-role scheduling keys, folded into motor's one policy.

MindIE Motor places prefill (and encode, union) legs by `scheduler_config.prefill_scheduler_type` and decode legs
by `decode_scheduler_type`; its deprecated `scheduler_type` sets both when they are not given. motor runs one
policy, `scheduler_type`, whose profile for each role places that role's legs
(motor/coordinator/scheduling/profiles.py). The fold takes the prefill side's policy and checks the decode side
against what that policy does with decode legs; a decode side motor cannot follow is warned about, naming what
motor does instead.
"""

from typing import Any, get_args

from motor.config.errors import ConfigIssue
from motor.config.models import SchedulerConfig
from motor.config.suggest import did_you_mean

ROLE_KEYS = ("prefill_scheduler_type", "decode_scheduler_type")
POLICIES: tuple[str, ...] = get_args(SchedulerConfig.model_fields["scheduler_type"].annotation)
DEFAULT_POLICY = SchedulerConfig.model_fields["scheduler_type"].default
# MindIE Motor's policy for decode legs only, which motor does not have
DYNAMIC_BUCKET = "dynamic_bucket"

# What each policy does with a decode leg, named by the policy that places every role's legs that way.
DECODE_PLACEMENT = {
    "round_robin": "round_robin",
    "load_balance": "load_balance",
    "kv_cache_affinity": "load_balance",  # MindIE Motor, too, load-balances decode under kv_cache_affinity
    "prefix_affinity": "load_balance",
    "pd_aware": "pd_aware",
}
_PLACEMENT_TEXT = {
    "round_robin": "in turn (round_robin)",
    "load_balance": "on the least in-flight load, tokens to compute and KV held (load_balance)",
    "pd_aware": "by the KV they hold and their batch (pd_aware)",
}


def fold_role_scheduler_types(
    scheduler: dict[str, Any], where: str, warnings: list[str], issues: list[ConfigIssue]
) -> None:
    """Replace `prefill_scheduler_type` / `decode_scheduler_type` in `scheduler` (the scheduler_config at JSON path
    `where`) with motor's `scheduler_type`, warning where the decode side differs from what motor does."""
    if not any(key in scheduler for key in ROLE_KEYS):
        return
    legacy = scheduler.get("scheduler_type")
    inherited = legacy if legacy is not None else DEFAULT_POLICY
    prefill = scheduler.pop("prefill_scheduler_type", inherited)
    decode = scheduler.pop("decode_scheduler_type", inherited)
    if not _known(prefill, POLICIES, f"{where}.prefill_scheduler_type", issues):
        return
    if legacy is not None and legacy != prefill:
        warnings.append(
            f"{where}.scheduler_type: {legacy!r} is MindIE Motor's deprecated single policy; "
            f"prefill_scheduler_type {prefill!r} wins, as there"
        )
    scheduler["scheduler_type"] = prefill
    if not _known(decode, (*POLICIES, DYNAMIC_BUCKET), f"{where}.decode_scheduler_type", issues):
        return
    placement = DECODE_PLACEMENT[prefill]
    if decode == DYNAMIC_BUCKET:
        warnings.append(
            f"{where}.decode_scheduler_type: motor has no dynamic_bucket policy; under {prefill!r} decode legs "
            f"are placed {_PLACEMENT_TEXT[placement]}"
        )
    elif DECODE_PLACEMENT[decode] != placement:
        warnings.append(
            f"{where}.decode_scheduler_type: {decode!r} is not what motor does with decode legs: it runs one "
            f"policy, the prefill side's {prefill!r}, which places them {_PLACEMENT_TEXT[placement]}"
        )


def _known(value: Any, allowed: tuple[str, ...], path: str, issues: list[ConfigIssue]) -> bool:
    if isinstance(value, str) and value in allowed:
        return True
    if value == DYNAMIC_BUCKET:
        message = (
            "dynamic_bucket places decode legs only (in MindIE Motor too); set it as decode_scheduler_type"
        )
    else:
        hint = did_you_mean(value, allowed) if isinstance(value, str) else ""
        message = f"{value!r} is not a scheduling policy{hint}; one of: {', '.join(allowed)}"
    issues.append(ConfigIssue(path, message))
    return False
