"""The fixes motor knows, in the order they are listed and installed."""

from motor.engine.patches import connector_metrics, cpu, idle_step, multi_connector, shm_spin
from motor.engine.patches.facts import Facts
from motor.engine.patches.patch import Decision, Patch


def known_patches() -> list[Patch]:
    return [
        multi_connector.PATCH,
        connector_metrics.PATCH,
        cpu.BROKEN_TORCH_EXTENSIONS,
        cpu.MOONCAKE_DEVICE_INDEX,
        shm_spin.PATCH,
        idle_step.PATCH,
    ]


def decide_all(facts: Facts) -> list[tuple[Patch, Decision]]:
    return [(patch, patch.decide(facts)) for patch in known_patches()]
