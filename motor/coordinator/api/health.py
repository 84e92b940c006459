"""`GET /health` and `GET /version` on the API port, where load balancers and clients look for them.

/health answers 200 while the coordinator can route with its dispatch profile (the profile's roles have active
instances: prefill and decode for a PD profile, union or prefill instances for aggregated) and 503 with an
OpenAI error body naming the missing roles otherwise. Encode instances are counted but never required: without
them the prefill side encodes multimodal requests itself. The management port keeps its own probes.
"""

from typing import Any

from motor import __version__
from motor.coordinator.http.errors import HttpError
from motor.coordinator.registry import ROLES, InstanceRegistry
from motor.kv.connectors import DispatchProfile

PD_ROLES = ("prefill", "decode")


def missing_roles(profile: DispatchProfile, registry: InstanceRegistry) -> list[str]:
    if profile == DispatchProfile.AGGREGATED:
        return [] if registry.targets("union") or registry.targets("prefill") else ["union"]
    return [role for role in PD_ROLES if not registry.targets(role)]


def health(profile: DispatchProfile, registry: InstanceRegistry) -> dict[str, Any]:
    """The 200 body; raises the 503 HttpError when a required role has no active instance."""
    missing = missing_roles(profile, registry)
    if missing:
        needed = "union (or prefill)" if profile == DispatchProfile.AGGREGATED else " and ".join(PD_ROLES)
        raise HttpError(
            503,
            f"cannot route: no active {' or '.join(missing)} instance; dispatch profile {profile.value} needs "
            f"active {needed} instances (see `motor status` or the controller's /controller/instances)",
            type_="service_unavailable",
            code="no_instance",
            headers=[(b"retry-after", b"1")],
        )
    return {
        "status": "ok",
        "profile": profile.value,
        "instances": {role: len(registry.targets(role)) for role in ROLES},
    }


def version(engine_types: tuple[str, ...]) -> dict[str, Any]:
    return {"version": __version__, "engine_types": list(engine_types)}
