"""Kubernetes objects from a Plan: pure dictionaries, grouped into files.

Layout (namespace = job_id): the ConfigMap `motor-config` and the Secrets of config_objects.py; for deploy_mode
multi_deployment one Deployment per component with its Services (components.py), node managers getting one
Deployment per engine instance with replicas = pods per instance; single_container puts every component in
one pod (single_container.py). Every pod is hardened as hardening.py says (security context, resources, no
service-account token: only the planner calls the Kubernetes API, with the Role of rbac.py) and NetworkPolicies keep everything but the inference
port inside the job. Monitoring (monitoring.py): pod templates carry the `prometheus.io/scrape|port|path`
annotations, a ConfigMap holds the Grafana dashboard, and `prometheus_operator=True` adds a PodMonitor and a
PrometheusRule. Every object carries the owner labels (labels.py) plus its component's labels, so the whole job
can be found and deleted by label. Each builder reads the job through one frozen ManifestContext (context.py).
"""

import secrets
from dataclasses import dataclass

from motor.config.topology import Topology
from motor.deploy.k8s import hardening
from motor.deploy.k8s.components import component_objects
from motor.deploy.k8s.config_objects import config_map, namespace, secret_objects
from motor.deploy.k8s.context import ConfigTexts, Manifest, ManifestContext
from motor.deploy.k8s.monitoring import dashboard_config_map, operator_objects
from motor.deploy.k8s.rbac import planner_rbac
from motor.deploy.k8s.single_container import NAME as SINGLE_CONTAINER
from motor.deploy.k8s.single_container import single_container_objects
from motor.deploy.plan import COORDINATOR, Plan


@dataclass(frozen=True)
class ManifestFile:
    name: str
    objects: list[Manifest]


def build_manifests(
    plan: Plan,
    topology: Topology,
    texts: ConfigTexts,
    *,
    create_namespace: bool = False,
    token: str | None = None,
    prometheus_operator: bool = False,
) -> list[ManifestFile]:
    """Every object of the deployment, in apply order (a file per group, numbered so `kubectl apply -f DIR`
    keeps that order). `token` fills the token Secret (default: a fresh random one); `prometheus_operator`
    adds the prometheus-operator objects (their CRDs must be installed in the cluster)."""
    if plan.target != "kubernetes":
        raise ValueError("build_manifests needs a plan built with target='kubernetes'")
    context = ManifestContext.of(plan, topology, texts)
    groups: list[tuple[str, list[Manifest]]] = []
    if create_namespace:
        groups.append(("namespace", [namespace(context)]))
    groups.append(
        ("config", [config_map(context), *secret_objects(context, token or secrets.token_urlsafe(32))])
    )
    if plan.of_kind("planner"):
        groups.append(("planner-rbac", planner_rbac(context)))
    if plan.deploy_mode == "single_container":
        groups.append(("single-container", single_container_objects(context)))
        pod_of = {component.name: SINGLE_CONTAINER for component in plan.components}
    else:
        for component in plan.components:
            groups.append((component.name, component_objects(context, component)))
        pod_of = {component.name: component.name for component in plan.components}
    groups.append(("network", network_policies(context, pod_of[COORDINATOR])))
    monitoring = [dashboard_config_map(context)]
    if prometheus_operator:
        monitoring += operator_objects(context, pod_of)
    groups.append(("monitoring", monitoring))
    return [
        ManifestFile(f"{position:02d}-{name}.yaml", objects)
        for position, (name, objects) in enumerate(groups)
    ]


def network_policies(context: ManifestContext, api_pod: str) -> list[Manifest]:
    """The job's NetworkPolicies; `api_pod` names the pod serving the coordinator's inference port."""
    infer_port = context.plan.component(COORDINATOR).ports["infer"]
    return hardening.network_policies(
        context.metadata, context.plan.job_id, context.selector(api_pod), infer_port
    )
