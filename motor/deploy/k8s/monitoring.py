"""Monitoring objects of a job: the Grafana dashboard ConfigMap (always) and, for clusters running the
prometheus-operator (`motor deploy --prometheus-operator`), a PodMonitor and a PrometheusRule.

The PodMonitor has one endpoint per metrics port of motor.deploy.prometheus, each kept to its own pod
(`app.kubernetes.io/name`) and port number, relabelled to the same `job`, `motor_job`, `instance` (the
component's name) and `role` labels a local deploy's targets carry, so the dashboard reads both alike; the
operator's own `pod` label tells replicas apart. The PrometheusRule holds the recording rule with the pool's
eviction watermark. Both objects carry the job's owner labels; a Prometheus whose podMonitorSelector or
ruleSelector asks for more labels has to be told about them.
"""

from motor.deploy.k8s.context import Manifest, ManifestContext
from motor.deploy.k8s.labels import NAME_LABEL
from motor.deploy.prometheus import METRICS_PATH, component_endpoints, rule_groups

OPERATOR_API = "monitoring.coreos.com/v1"
MONITOR_NAME = "motor"
DASHBOARD_CONFIG_MAP = "motor-grafana-dashboard"
DASHBOARD_KEY = "motor.json"
# The label Grafana's dashboard sidecar (e.g. the Grafana Helm chart's) looks for by default.
GRAFANA_SIDECAR_LABEL = "grafana_dashboard"
POD_NAME_META = "__meta_kubernetes_pod_label_" + NAME_LABEL.replace(".", "_").replace("/", "_").replace(
    "-", "_"
)


def dashboard_config_map(context: ManifestContext) -> Manifest:
    from motor.observability.dashboard import dashboard_json

    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": context.metadata(DASHBOARD_CONFIG_MAP, {GRAFANA_SIDECAR_LABEL: "1"}),
        "data": {DASHBOARD_KEY: dashboard_json()},
    }


def operator_objects(context: ManifestContext, pod_of: dict[str, str]) -> list[Manifest]:
    """The PodMonitor (and the PrometheusRule when there is a pool). `pod_of` maps each component to the
    `app.kubernetes.io/name` of the pod it runs in."""
    objects = [pod_monitor(context, pod_of)]
    rules = rule_groups(context.plan, context.topology.pool)
    if any(group["rules"] for group in rules["groups"]):
        objects.append(
            {
                "apiVersion": OPERATOR_API,
                "kind": "PrometheusRule",
                "metadata": context.metadata(MONITOR_NAME),
                "spec": rules,
            }
        )
    return objects


def pod_monitor(context: ManifestContext, pod_of: dict[str, str]) -> Manifest:
    plan = context.plan
    endpoints = []
    for component in plan.components:
        for endpoint in component_endpoints(component):
            labels = endpoint.labels(plan.job_id)
            endpoints.append(
                {
                    "portNumber": endpoint.port,
                    "path": METRICS_PATH,
                    "relabelings": [
                        {"action": "keep", "sourceLabels": [POD_NAME_META], "regex": pod_of[component.name]},
                        *(
                            {"action": "replace", "targetLabel": name, "replacement": value}
                            for name, value in labels.items()
                        ),
                    ],
                }
            )
    return {
        "apiVersion": OPERATOR_API,
        "kind": "PodMonitor",
        "metadata": context.metadata(MONITOR_NAME),
        "spec": {
            "selector": {"matchLabels": context.job_selector()},
            "podMetricsEndpoints": endpoints,
        },
    }
