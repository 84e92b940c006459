"""MultiConnector's Prometheus metrics fail on a sub-connector that reports transfer stats but has no metrics.

vLLM 0.32's MultiConnector asserts that every sub-connector whose transfer stats arrive has registered
Prometheus metrics. MooncakeConnector reports stats without registering metrics, so inside a MultiConnector
(transfer connector + pool backend) the first finished transfer fails the prefill engine's output handler and
every later request gets HTTP 500. The fix skips the stats of such sub-connectors; the others are still
observed.
"""

from types import ModuleType
from typing import Any

from motor.engine.patches.facts import UNLISTED_METRICS_ASSERTION, Facts
from motor.engine.patches.patch import Decision, Patch, PatchTargetError, replace_method

TARGET = "vllm.distributed.kv_transfer.kv_connector.v1.multi_connector"
METRICS_CLASS = "MultiKVConnectorPromMetrics"


def decide(facts: Facts) -> Decision:
    if facts.vllm_version is None:
        return Decision(False, "vLLM is not installed")
    if not facts.multi_connector_asserts_metrics:
        return Decision(
            False, f"vLLM {facts.vllm_version}'s MultiConnector does not assert on unlisted metrics"
        )
    return Decision(
        True,
        f"vLLM {facts.vllm_version}'s MultiConnector asserts ('{UNLISTED_METRICS_ASSERTION}') when a "
        "sub-connector without Prometheus metrics (MooncakeConnector) reports transfer stats: requests fail",
    )


def observe(self: Any, transfer_stats_data: dict[str, Any], engine_idx: int = 0) -> None:
    for connector_id, stats in transfer_stats_data.items():
        metrics = self._prom_metrics.get(connector_id)
        if metrics is not None:
            metrics.observe(stats, engine_idx)


def apply(module: ModuleType | None, _facts: Facts) -> None:
    cls = getattr(module, METRICS_CLASS, None)
    if cls is None or not hasattr(cls, "observe"):
        raise PatchTargetError(f"{TARGET} has no {METRICS_CLASS}.observe")
    replace_method(cls, "observe", observe)


PATCH = Patch(
    name="multi-connector-unlisted-metrics",
    summary="MultiConnector skips transfer stats of sub-connectors that have no Prometheus metrics",
    decide=decide,
    targets=(TARGET,),
    apply=apply,
)
