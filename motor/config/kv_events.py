"""Whether the engines publish vLLM's KV events: when the coordinator routes on them (scheduler_type
kv_cache_affinity), every prefill and union engine motor launches gets a `kv-events-config` (see
motor.deploy.engines.kv_events). Pure."""

from collections.abc import Mapping
from typing import Any

from motor.config.models import UserConfig

KV_EVENTS_SCHEDULER = "kv_cache_affinity"
KV_EVENTS_ROLES = ("prefill", "union")
KV_EVENTS_TOPIC = "kv-events"  # pyMotor's topic
DEFAULT_HASH_ALGORITHM = "sha256"


def kv_events_enabled(user_config: UserConfig | Mapping[str, Any]) -> bool:
    """True when the coordinator's scheduler_type is kv_cache_affinity: a validated UserConfig, or the raw
    user_config.json (read before any name mapping)."""
    if isinstance(user_config, UserConfig):
        scheduler = user_config.motor_coordinator_config.scheduler_config.scheduler_type
        return str(scheduler) == KV_EVENTS_SCHEDULER
    coordinator = user_config.get("motor_coordinator_config")
    scheduler = coordinator.get("scheduler_config") if isinstance(coordinator, Mapping) else None
    value = scheduler.get("scheduler_type") if isinstance(scheduler, Mapping) else None
    return value == KV_EVENTS_SCHEDULER
