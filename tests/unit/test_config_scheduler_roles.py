"""MindIE Motor's prefill_scheduler_type / decode_scheduler_type folded into motor's scheduler_type: the policy
motor runs, the warnings where the decode side differs from what motor does, errors naming the path; and the fold's
view of each policy's decode placement agrees with the coordinator's scheduling profiles."""

from typing import Any

import pytest

from motor.config import load_documents
from motor.config.scheduler_roles import DECODE_PLACEMENT, POLICIES
from motor.coordinator.scheduling.profiles import PolicyOptions, SchedulingProfile, build_profile
from tests.unit.config_cases import issues_of, seed

WHERE = "motor_coordinator_config.scheduler_config"


def with_scheduler(**keys: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    user, env = seed()
    scheduler = user["motor_coordinator_config"].setdefault("scheduler_config", {})
    scheduler.pop("scheduler_type", None)
    scheduler.update(keys)
    return user, env


def folded(**keys: Any) -> tuple[str, list[str]]:
    """The policy motor runs and the warnings about the scheduler's keys."""
    topology = load_documents(*with_scheduler(**keys))
    policy = topology.user.motor_coordinator_config.scheduler_config.scheduler_type
    return policy, [w for w in topology.warnings if w.startswith(f"{WHERE}.")]


@pytest.mark.parametrize(
    ("keys", "policy"),
    [
        (
            {"prefill_scheduler_type": "kv_cache_affinity", "decode_scheduler_type": "load_balance"},
            "kv_cache_affinity",
        ),
        (
            {"prefill_scheduler_type": "kv_cache_affinity", "decode_scheduler_type": "kv_cache_affinity"},
            "kv_cache_affinity",
        ),
        ({"prefill_scheduler_type": "round_robin", "decode_scheduler_type": "round_robin"}, "round_robin"),
        ({"prefill_scheduler_type": "load_balance"}, "load_balance"),
        ({"decode_scheduler_type": "load_balance"}, "load_balance"),
        ({"scheduler_type": "round_robin", "decode_scheduler_type": "round_robin"}, "round_robin"),
        (
            {"scheduler_type": "kv_cache_affinity", "prefill_scheduler_type": "kv_cache_affinity"},
            "kv_cache_affinity",
        ),
        ({"prefill_scheduler_type": "pd_aware", "decode_scheduler_type": "pd_aware"}, "pd_aware"),
    ],
)
def test_pairs_motor_runs_fold_without_a_warning(keys: dict[str, str], policy: str) -> None:
    assert folded(**keys) == (policy, [])


def test_a_decode_side_motor_does_not_follow_is_warned_naming_what_motor_does() -> None:
    policy, warnings = folded(prefill_scheduler_type="load_balance", decode_scheduler_type="round_robin")
    assert policy == "load_balance"
    assert warnings == [
        f"{WHERE}.decode_scheduler_type: 'round_robin' is not what motor does with decode legs: it runs one policy, "
        "the prefill side's 'load_balance', which places them on the least in-flight load, tokens to compute and "
        "KV held (load_balance)"
    ]


def test_dynamic_bucket_on_decode_is_warned_and_refused_on_prefill() -> None:
    policy, warnings = folded(
        prefill_scheduler_type="kv_cache_affinity", decode_scheduler_type="dynamic_bucket"
    )
    assert policy == "kv_cache_affinity"
    assert warnings == [
        f"{WHERE}.decode_scheduler_type: motor has no dynamic_bucket policy; under 'kv_cache_affinity' decode legs "
        "are placed on the least in-flight load, tokens to compute and KV held (load_balance)"
    ]
    issues = issues_of(*with_scheduler(prefill_scheduler_type="dynamic_bucket"))
    assert issues == {
        f"{WHERE}.prefill_scheduler_type": "dynamic_bucket places decode legs only (in MindIE Motor too); set it as "
        "decode_scheduler_type"
    }


def test_the_prefill_side_wins_over_the_deprecated_scheduler_type_with_a_warning() -> None:
    policy, warnings = folded(scheduler_type="round_robin", prefill_scheduler_type="load_balance")
    assert policy == "load_balance"
    assert warnings[0] == (
        f"{WHERE}.scheduler_type: 'round_robin' is MindIE Motor's deprecated single policy; "
        "prefill_scheduler_type 'load_balance' wins, as there"
    )


def test_unknown_policies_are_errors_at_their_path_with_a_suggestion() -> None:
    issues = issues_of(*with_scheduler(prefill_scheduler_type="kv_cache_affinty", decode_scheduler_type=3))
    assert set(issues) == {
        f"{WHERE}.prefill_scheduler_type"
    }  # the decode side is checked once the policy is known
    assert "(did you mean 'kv_cache_affinity'?)" in issues[f"{WHERE}.prefill_scheduler_type"]
    issues = issues_of(*with_scheduler(prefill_scheduler_type="load_balance", decode_scheduler_type=3))
    assert issues[f"{WHERE}.decode_scheduler_type"].startswith("3 is not a scheduling policy; one of: ")


def shape(profile: SchedulingProfile) -> tuple[Any, ...]:
    return (
        tuple(type(f) for f in profile.pool_filters + profile.filters),
        tuple((type(scorer), weight) for scorer, weight in profile.scorers),
        type(profile.picker),
    )


@pytest.mark.parametrize("policy", POLICIES)
def test_decode_placement_is_the_coordinators_decode_profile(policy: str) -> None:
    expected = build_profile(DECODE_PLACEMENT[policy], "decode", PolicyOptions())  # type: ignore[arg-type]
    assert shape(build_profile(policy, "decode", PolicyOptions())) == shape(expected)  # type: ignore[arg-type]
