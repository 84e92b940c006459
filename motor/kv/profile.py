"""Dispatch profile resolution: which way a request crosses P and D for this deployment."""

from dataclasses import dataclass, field
from typing import Any

from motor.kv.connectors import (
    DispatchProfile,
    is_pool_backend,
    known_transfer_connectors,
    lookup,
)
from motor.kv.levels import transfer_level


@dataclass(frozen=True)
class ProfileResolution:
    profile: DispatchProfile
    decided_by: str
    why: str
    warnings: list[str] = field(default_factory=list)


class ProfileError(ValueError):
    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


def deciding_connector(transfer_config: dict[str, Any]) -> tuple[str, str]:
    """(connector name, its JSON path relative to kv_transfer_config) of the connector that decides the profile."""
    suffix, level = transfer_level(transfer_config)
    if not level:
        return "", suffix.lstrip(".")
    return str(level.get("kv_connector")), f"{suffix}.kv_connector".lstrip(".")


def resolve_profile(
    *,
    engine_type: str,
    transfer_config: dict[str, Any] | None,
    transfer_config_path: str,
    explicit: DispatchProfile | None,
    explicit_path: str,
    aggregated_only: bool,
) -> ProfileResolution:
    """Resolve the profile; raise ProfileError naming the path and the fix when it cannot be decided."""
    derived = _derive(
        engine_type, transfer_config, transfer_config_path, aggregated_only, strict=explicit is None
    )
    if explicit is None:
        assert derived is not None
        return derived
    warnings = []
    if derived is not None and derived.profile != explicit:
        warnings.append(
            f"{explicit_path}: {explicit.value} overrides {derived.profile.value}, which {derived.decided_by} "
            f"implies ({derived.why})"
        )
    return ProfileResolution(explicit, explicit_path, "set explicitly", warnings)


def _derive(
    engine_type: str,
    transfer_config: dict[str, Any] | None,
    path: str,
    aggregated_only: bool,
    *,
    strict: bool,
) -> ProfileResolution | None:
    if aggregated_only:
        return ProfileResolution(
            DispatchProfile.AGGREGATED, "union instances", "every instance does prefill and decode"
        )
    if engine_type == "sglang":
        return ProfileResolution(
            DispatchProfile.CONCURRENT,
            "engine_type sglang",
            "SGLang pairs P and D through bootstrap host/port/room",
        )
    if not transfer_config or not transfer_config.get("kv_connector"):
        if strict:
            raise ProfileError(
                path,
                "prefill and decode instances need a kv_transfer_config with a kv_connector to move KV between "
                "them; add one, or use union instances for aggregated serving",
            )
        return None
    name, sub_path = deciding_connector(transfer_config)
    capability = lookup(name)
    if capability is None:
        if strict:
            raise ProfileError(
                f"{path}.{sub_path}",
                f"connector {name!r} is not in motor's recognition whitelist "
                f"({', '.join(known_transfer_connectors())}); set "
                "motor_coordinator_config.scheduler_config.dispatch_profile to one of "
                f"{', '.join(p.value for p in DispatchProfile if p != DispatchProfile.AGGREGATED)} to say how it works",
            )
        return None
    kind = "pool backend" if is_pool_backend(name) else "transfer connector"
    return ProfileResolution(capability.profile, name, f"{kind}: {capability.why}")
