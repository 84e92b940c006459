"""Where Prometheus finds each component's /metrics, computed from the Plan (pure data, no I/O).

Every component that serves metrics becomes one or two scrape targets (`metrics_endpoints`):

| component | port | Prometheus `job` | what it serves |
|---|---|---|---|
| kv pool | `metrics` | `motor-kv-pool` | mooncake_master's own metrics (occupancy, puts/gets, evictions) |
| controller | `api` | `motor-controller` | `motor_controller_*` (instances by role and status) |
| coordinator | `mgmt` | `motor-coordinator` | `motor_coordinator_*` (requests, latencies, legs, retries) |
| node manager | `engine` | `motor-engine` | the engine's own metrics (vLLM's `vllm:*`; the simulator serves the same names) |
| node manager | `nm` | `motor-node-manager` | `motor_node_manager_*` (engine state and restarts) |

Each target carries `job` (above), `motor_job` (the deployment's job_id), `instance` (the component's name,
e.g. `prefill-0`) and, for engines and node managers, `role`. Targets of other components get no `role`
label: the coordinator and the controller export series with a `role` label of their own, which a target
label would rename to `exported_role`.

One recording rule carries what the pool's own metrics do not say: `motor:kv_pool_eviction_high_watermark_ratio`
(the configured `eviction_high_watermark_ratio`, labelled with `motor_job`), so a dashboard can draw occupancy
against it.

Locally the targets go into a `file_sd` file next to the rules and a minimal prometheus.yml (`prometheus_files`);
on Kubernetes the same endpoints become a prometheus-operator PodMonitor and the rule a PrometheusRule
(motor.deploy.k8s.monitoring), plus pod annotations.
"""

import json
from dataclasses import dataclass
from typing import Any

import yaml

from motor.deploy.plan import LOCAL_HOST, Component, ComponentKind, Plan
from motor.kv.pool import KvCachePoolConfig

METRICS_PATH = "/metrics"
TARGETS_FILE = "targets.json"
RULES_FILE = "rules.yml"
CONFIG_FILE = "prometheus.yml"
WATERMARK_RECORD = "motor:kv_pool_eviction_high_watermark_ratio"
PROMETHEUS_DIR = "prometheus"
DEFAULT_SCRAPE_INTERVAL = "15s"
JOB_ID_LABEL = "motor_job"

# Per component kind: (Prometheus job, port name), the first being the one pod annotations point at.
ENDPOINTS_BY_KIND: dict[ComponentKind, tuple[tuple[str, str], ...]] = {
    "kv_pool": (("motor-kv-pool", "metrics"),),
    "controller": (("motor-controller", "api"),),
    "coordinator": (("motor-coordinator", "mgmt"),),
    "planner": (("motor-planner", "api"),),
    "node_manager": (("motor-engine", "engine"), ("motor-node-manager", "nm")),
}


@dataclass(frozen=True)
class MetricsEndpoint:
    component: str
    job: str
    port_name: str
    port: int
    role: str | None = None

    def labels(self, job_id: str) -> dict[str, str]:
        labels = {"job": self.job, JOB_ID_LABEL: job_id, "instance": self.component}
        if self.role is not None:
            labels["role"] = self.role
        return labels


def component_endpoints(component: Component) -> list[MetricsEndpoint]:
    return [
        MetricsEndpoint(component.name, job, port_name, component.ports[port_name], component.role)
        for job, port_name in ENDPOINTS_BY_KIND[component.kind]
    ]


def metrics_endpoints(plan: Plan) -> list[MetricsEndpoint]:
    """A standby serves no metrics of its own: its ports are the leader's, scraped under the leader's name."""
    return [
        endpoint
        for component in plan.components
        if component.standby_for is None
        for endpoint in component_endpoints(component)
    ]


def target_groups(plan: Plan, host: str = LOCAL_HOST) -> list[dict[str, Any]]:
    """Prometheus target groups (the `file_sd` format, also valid as `static_configs`)."""
    return [
        {"targets": [f"{host}:{endpoint.port}"], "labels": endpoint.labels(plan.job_id)}
        for endpoint in metrics_endpoints(plan)
    ]


def targets_json(plan: Plan, host: str = LOCAL_HOST) -> str:
    return json.dumps(target_groups(plan, host), indent=2) + "\n"


def recording_rules(plan: Plan, pool: KvCachePoolConfig | None) -> list[dict[str, Any]]:
    """Prometheus recording rules for the job (none without a pool)."""
    if pool is None:
        return []
    return [
        {
            "record": WATERMARK_RECORD,
            "expr": f"vector({pool.eviction_high_watermark_ratio})",
            "labels": {JOB_ID_LABEL: plan.job_id},
        }
    ]


def rule_groups(plan: Plan, pool: KvCachePoolConfig | None) -> dict[str, Any]:
    """A Prometheus rule file (also the `spec` of a PrometheusRule)."""
    return {"groups": [{"name": f"motor-{plan.job_id}", "rules": recording_rules(plan, pool)}]}


def prometheus_config(
    plan: Plan,
    *,
    targets_file: str | None = None,
    rules_file: str | None = None,
    scrape_interval: str = DEFAULT_SCRAPE_INTERVAL,
) -> dict[str, Any]:
    """A whole prometheus.yml scraping the job: through `targets_file` (file_sd, re-read when it changes)
    when given, else with the targets inline (static_configs); with the recording rules of `rules_file`."""
    scrape: dict[str, Any] = {"job_name": f"motor-{plan.job_id}", "metrics_path": METRICS_PATH}
    if targets_file is not None:
        scrape["file_sd_configs"] = [{"files": [targets_file]}]
    else:
        scrape["static_configs"] = target_groups(plan)
    config: dict[str, Any] = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
    }
    if rules_file is not None:
        config["rule_files"] = [rules_file]
    config["scrape_configs"] = [scrape]
    return config


def prometheus_files(plan: Plan, pool: KvCachePoolConfig | None, directory: str) -> dict[str, str]:
    """The files that configure Prometheus for the job when written into `directory`: the targets, the rules
    and a prometheus.yml naming both by their path there."""
    base = directory.rstrip("/")
    config = prometheus_config(plan, targets_file=f"{base}/{TARGETS_FILE}", rules_file=f"{base}/{RULES_FILE}")
    return {
        TARGETS_FILE: targets_json(plan),
        RULES_FILE: yaml.safe_dump(rule_groups(plan, pool), sort_keys=False),
        CONFIG_FILE: yaml.safe_dump(config, sort_keys=False),
    }
