"""Deployments and Services: the objects around a pod template, and which Services each component gets."""

from motor.deploy.k8s.context import Manifest, ManifestContext
from motor.deploy.k8s.labels import (
    COMPONENT_LABEL,
    CONFIG_HASH_ANNOTATION,
    INDEX_LABEL,
    NAME_LABEL,
    ROLE_LABEL,
    owner_labels,
)
from motor.deploy.plan import COORDINATOR, COORDINATOR_MGMT, Component

SERVICE_COMPONENTS = ("controller", "coordinator", "kv_pool")


def component_labels(component: Component) -> dict[str, str]:
    labels = {NAME_LABEL: component.name, COMPONENT_LABEL: component.kind.replace("_", "-")}
    if component.role is not None:
        labels[ROLE_LABEL] = component.role
        labels[INDEX_LABEL] = str(component.index)
    return labels


def deployment(
    context: ManifestContext,
    name: str,
    labels: dict[str, str],
    replicas: int,
    pod_spec: Manifest,
    recreate: bool,
    metrics_port: int | None = None,
) -> Manifest:
    """A Deployment of `replicas` pods of `pod_spec`, restarted when the config changes (its hash is an
    annotation of the template); `recreate` stops the old pods before the new ones start."""
    annotations = {CONFIG_HASH_ANNOTATION: context.config_hash}
    if metrics_port is not None:
        annotations.update(scrape_annotations(metrics_port))
    spec: Manifest = {
        "replicas": replicas,
        "selector": {"matchLabels": context.selector(name)},
        "template": {
            "metadata": {
                "labels": {**owner_labels(context.plan.job_id), **labels},
                "annotations": annotations,
            },
            "spec": pod_spec,
        },
    }
    if recreate:
        spec["strategy"] = {"type": "Recreate"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": context.metadata(name, labels),
        "spec": spec,
    }


def scrape_annotations(port: int) -> dict[str, str]:
    return {"prometheus.io/scrape": "true", "prometheus.io/port": str(port), "prometheus.io/path": "/metrics"}


def component_services(context: ManifestContext, component: Component, pod_name: str) -> list[Manifest]:
    """The controller's and the pool master's ports; the coordinator's inference port, and its management
    port apart on a Service of its own (clients never need it). `pod_name` names the pod they select."""
    labels = component_labels(component)
    if component.kind == "coordinator":
        return [
            service(context, COORDINATOR, {"infer": component.ports["infer"]}, labels, pod_name),
            service(context, COORDINATOR_MGMT, {"mgmt": component.ports["mgmt"]}, labels, pod_name),
        ]
    if component.kind in SERVICE_COMPONENTS:
        return [service(context, component.name, component.ports, labels, pod_name)]
    return []


def service(
    context: ManifestContext, name: str, ports: dict[str, int], labels: dict[str, str], pod_name: str
) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": context.metadata(name, labels),
        "spec": {
            "type": "ClusterIP",
            "selector": context.selector(pod_name),
            "ports": [
                {"name": port_name, "port": port, "targetPort": port_name, "protocol": "TCP"}
                for port_name, port in ports.items()
            ],
        },
    }
