"""Which flow a request takes for each profile and instance set, and what readiness requires."""

import pytest

from motor.coordinator.dispatch.failures import LegFailure
from motor.coordinator.dispatch.flows import (
    AGGREGATED_ON_PREFILL,
    AGGREGATED_ON_UNION,
    PD_FLOWS,
    choose_flow,
)
from motor.coordinator.registry import InstanceRegistry
from motor.kv.connectors import DispatchProfile
from motor.protocol.instances import Endpoint, Instance, InstanceEvent


def registry(*roles: str) -> InstanceRegistry:
    instances = [
        Instance(
            id=f"{role}-{i}",
            role=role,  # type: ignore[arg-type]
            engine_id=f"{role}-{i}",
            model_name="m",
            endpoints=[Endpoint(host="127.0.0.1", port=9000 + i)],
        )
        for i, role in enumerate(roles)
    ]
    result = InstanceRegistry()
    result.apply(InstanceEvent(event="set", instances=instances))
    return result


@pytest.mark.parametrize("profile", [p for p in DispatchProfile if p != DispatchProfile.AGGREGATED])
def test_pd_profiles_use_their_flow_and_fall_back_to_aggregated(profile: DispatchProfile) -> None:
    assert choose_flow(profile, registry("prefill", "decode")) is PD_FLOWS[profile]
    assert choose_flow(profile, registry("prefill", "decode", "union")) is PD_FLOWS[profile]
    assert choose_flow(profile, registry("prefill")) is AGGREGATED_ON_PREFILL
    assert choose_flow(profile, registry("union", "decode")) is AGGREGATED_ON_UNION


def test_aggregated_profile_prefers_union_then_prefill() -> None:
    assert choose_flow(DispatchProfile.AGGREGATED, registry("union", "prefill")) is AGGREGATED_ON_UNION
    assert choose_flow(DispatchProfile.AGGREGATED, registry("prefill", "decode")) is AGGREGATED_ON_PREFILL


def test_only_decode_or_nothing_is_a_retryable_503_with_a_reason() -> None:
    with pytest.raises(LegFailure) as only_decode:
        choose_flow(DispatchProfile.PREFILL_FIRST, registry("decode", "decode"))
    failure = only_decode.value
    assert failure.status == 503 and failure.reason == "no_prefill_instance" and failure.retryable
    assert failure.role == "prefill" and failure.target is None
    assert "only decode instances" in failure.message
    with pytest.raises(LegFailure) as nothing:
        choose_flow(DispatchProfile.DECODE_FIRST, registry())
    assert nothing.value.status == 503 and nothing.value.reason == "no_instance" and nothing.value.retryable
    with pytest.raises(LegFailure) as nothing_aggregated:
        choose_flow(DispatchProfile.AGGREGATED, registry("decode"))
    assert nothing_aggregated.value.role == "prefill"
    with pytest.raises(LegFailure) as no_union:
        choose_flow(DispatchProfile.AGGREGATED, registry())
    assert no_union.value.role == "union" and no_union.value.reason == "no_instance"


def test_inactive_instances_do_not_count() -> None:
    reg = registry("prefill", "decode")
    decode = reg.instances["decode-1"].model_copy(update={"status": "inactive"})
    reg.apply(InstanceEvent(event="add", instances=[decode]))
    assert choose_flow(DispatchProfile.CONCURRENT, reg) is AGGREGATED_ON_PREFILL


@pytest.mark.parametrize("profile", sorted(PD_FLOWS))
def test_without_the_fallback_a_pd_profile_waits_for_its_roles(profile: DispatchProfile) -> None:
    assert choose_flow(profile, registry("prefill", "decode"), False) is PD_FLOWS[profile]
    for roles, missing in ((("prefill",), "decode"), (("union", "decode"), "prefill")):
        with pytest.raises(LegFailure) as refused:
            choose_flow(profile, registry(*roles), False)
        assert refused.value.reason == f"no_{missing}_instance" and refused.value.retryable
        assert "enable_pd_separation_fallback_to_hybrid is false" in refused.value.message
