"""Kubernetes objects from a Plan: pure dictionaries, grouped into files.

Layout (namespace = job_id): ConfigMap `motor-config` (user_config.json, env.json and the engines' store
config, mounted at the plan's config_dir); Secret `motor-controller-token` (the token controller, coordinator and
node managers share, unless env.json sets MOTOR_CONTROLLER_TOKEN; created once and never overwritten, so
running pods keep agreeing); RBAC for the controller; for deploy_mode multi_deployment one Deployment per
component (+ a Service for the controller, the coordinator and the KV pool), node managers getting one
Deployment per engine instance with replicas = pods per instance. single_container puts every component in one
pod (see single_container.py). Monitoring (monitoring.py): pod templates carry the `prometheus.io/scrape|port|
path` annotations (the coordinator's management port, the controller's API port, the pool master's metrics port,
an engine host's engine port), a ConfigMap holds the Grafana dashboard, and `prometheus_operator=True` adds a
PodMonitor and a PrometheusRule. Every object carries the owner labels (labels.py) plus its component's labels,
so the whole job can be found and deleted by label.
"""

import hashlib
import json
import secrets
from dataclasses import dataclass
from typing import Any

from motor.config.hardware import accelerator_resource
from motor.config.topology import Topology
from motor.deploy.k8s.labels import (
    COMPONENT_LABEL,
    CONFIG_HASH_ANNOTATION,
    CONFIG_MAP,
    CONTROLLER_ACCOUNT,
    INDEX_LABEL,
    JOB_LABEL,
    NAME_LABEL,
    ROLE_LABEL,
    TOKEN_KEY,
    TOKEN_SECRET,
    owner_labels,
)
from motor.deploy.k8s.monitoring import dashboard_config_map, operator_objects
from motor.deploy.k8s.single_container import NAME as SINGLE_CONTAINER
from motor.deploy.k8s.single_container import single_container_objects
from motor.deploy.plan import Component, Plan
from motor.deploy.prometheus import component_endpoints
from motor.protocol import env as env_names

Manifest = dict[str, Any]

# The image of a local config previewed as Kubernetes objects; Kubernetes deploy modes must name theirs.
PREVIEW_IMAGE = "motor:latest"
SERVICE_COMPONENTS = ("controller", "coordinator", "kv_pool")


@dataclass(frozen=True)
class ConfigTexts:
    """The config pair exactly as the user wrote it: stored in the ConfigMap and used as the update baseline."""

    user: str
    env: str


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
    context = ManifestContext(plan, topology, texts)
    groups: list[tuple[str, list[Manifest]]] = []
    if create_namespace:
        groups.append(("namespace", [context.namespace()]))
    config = [context.config_map()]
    if context.token_from_secret:
        config.append(context.token_secret(token or secrets.token_urlsafe(32)))
    groups.append(("config", config))
    groups.append(("controller-rbac", context.controller_rbac()))
    if plan.deploy_mode == "single_container":
        groups.append(("single-container", single_container_objects(context)))
        pod_of = {component.name: SINGLE_CONTAINER for component in plan.components}
    else:
        for component in plan.components:
            groups.append((component.name, context.component_objects(component)))
        pod_of = {component.name: component.name for component in plan.components}
    monitoring = [dashboard_config_map(context)]
    if prometheus_operator:
        monitoring += operator_objects(context, pod_of)
    groups.append(("monitoring", monitoring))
    return [
        ManifestFile(f"{position:02d}-{name}.yaml", objects)
        for position, (name, objects) in enumerate(groups)
    ]


class ManifestContext:
    """What every object needs: the plan, the deploy section, labels and the config texts."""

    def __init__(self, plan: Plan, topology: Topology, texts: ConfigTexts) -> None:
        self.plan = plan
        self.topology = topology
        self.deploy = topology.user.motor_deploy_config
        self.texts = texts
        self.namespace_name = plan.job_id
        self.config_hash = hashlib.sha256(f"{texts.user}\0{texts.env}".encode()).hexdigest()
        self.token_from_secret = env_names.CONTROLLER_TOKEN not in topology.env.motor_common_env
        self.image = self.deploy.image_name or PREVIEW_IMAGE

    # ---- metadata -------------------------------------------------------------------------------------------

    def metadata(self, name: str, labels: dict[str, str] | None = None) -> Manifest:
        return {
            "name": name,
            "namespace": self.namespace_name,
            "labels": {**owner_labels(self.plan.job_id), **(labels or {})},
        }

    def component_labels(self, component: Component) -> dict[str, str]:
        labels = {NAME_LABEL: component.name, COMPONENT_LABEL: component.kind.replace("_", "-")}
        if component.role is not None:
            labels[ROLE_LABEL] = component.role
            labels[INDEX_LABEL] = str(component.index)
        return labels

    def selector(self, name: str) -> dict[str, str]:
        return {JOB_LABEL: self.plan.job_id, NAME_LABEL: name}

    def selector_of_job(self) -> dict[str, str]:
        return {JOB_LABEL: self.plan.job_id}

    # ---- shared objects -------------------------------------------------------------------------------------

    def namespace(self) -> Manifest:
        return {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": self.namespace_name, "labels": owner_labels(self.plan.job_id)},
        }

    def config_map(self) -> Manifest:
        user_text = self.texts.user
        if self.plan.deploy_mode == "local":
            user_text = _with_deploy_mode(user_text, "multi_deployment")
        data = {"user_config.json": user_text, "env.json": self.texts.env, **self.plan.files}
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": self.metadata(CONFIG_MAP), "data": data}

    def token_secret(self, token: str) -> Manifest:
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": self.metadata(TOKEN_SECRET),
            "type": "Opaque",
            "stringData": {TOKEN_KEY: token},
        }

    def controller_rbac(self) -> list[Manifest]:
        labels = {COMPONENT_LABEL: "controller"}
        return [
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": self.metadata(CONTROLLER_ACCOUNT, labels),
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": self.metadata(CONTROLLER_ACCOUNT, labels),
                "rules": [
                    {
                        "apiGroups": [""],
                        "resources": ["pods", "configmaps"],
                        "verbs": ["get", "list", "watch"],
                    },
                    {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch"]},
                ],
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": self.metadata(CONTROLLER_ACCOUNT, labels),
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": CONTROLLER_ACCOUNT,
                },
                "subjects": [
                    {"kind": "ServiceAccount", "name": CONTROLLER_ACCOUNT, "namespace": self.namespace_name}
                ],
            },
        ]

    # ---- per component --------------------------------------------------------------------------------------

    def component_objects(self, component: Component) -> list[Manifest]:
        objects = [self.deployment(component)]
        if component.kind in SERVICE_COMPONENTS:
            objects.append(self.service(component.name, component, self.component_labels(component)))
        return objects

    def deployment(self, component: Component) -> Manifest:
        labels = self.component_labels(component)
        container: Manifest = {
            "name": component.kind.replace("_", "-"),
            "image": self.image,
            "imagePullPolicy": "IfNotPresent",
            "command": list(component.argv),
            "env": self.env(
                component.env, with_token=component.kind in ("controller", "coordinator", "node_manager")
            ),
            "ports": [
                {"name": name, "containerPort": port, "protocol": "TCP"}
                for name, port in component.ports.items()
            ],
            **self.probes(component),
            "volumeMounts": [
                {"name": "config", "mountPath": self.plan.config_dir, "readOnly": True},
                {"name": "run", "mountPath": component.env[env_names.RUN_DIR]},
            ],
        }
        volumes: list[Manifest] = [self.config_volume(), {"name": "run", "emptyDir": {}}]
        if component.kind == "node_manager":
            container["volumeMounts"].append(self.weight_mount())
            volumes.append(self.weight_volume())
            resources = self.accelerator_resources(component.accelerators)
            if resources:
                container["resources"] = resources
        pod_spec: Manifest = {"containers": [container], "volumes": volumes}
        if component.kind == "controller":
            pod_spec["serviceAccountName"] = CONTROLLER_ACCOUNT
        else:
            pod_spec["automountServiceAccountToken"] = False
        # Accelerator pods and the single pool master must not overlap during a rollout.
        recreate = component.kind in ("node_manager", "kv_pool")
        return self.deployment_object(
            component.name,
            labels,
            component.replicas,
            pod_spec,
            recreate,
            metrics_port=component_endpoints(component)[0].port,
        )

    def deployment_object(
        self,
        name: str,
        labels: dict[str, str],
        replicas: int,
        pod_spec: Manifest,
        recreate: bool,
        metrics_port: int | None = None,
    ) -> Manifest:
        annotations = {CONFIG_HASH_ANNOTATION: self.config_hash}
        if metrics_port is not None:
            annotations.update(scrape_annotations(metrics_port))
        spec: Manifest = {
            "replicas": replicas,
            "selector": {"matchLabels": self.selector(name)},
            "template": {
                "metadata": {
                    "labels": {**owner_labels(self.plan.job_id), **labels},
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
            "metadata": self.metadata(name, labels),
            "spec": spec,
        }

    def service(
        self, name: str, component: Component, labels: dict[str, str], selector_name: str | None = None
    ) -> Manifest:
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": self.metadata(name, labels),
            "spec": {
                "type": "ClusterIP",
                "selector": self.selector(selector_name or name),
                "ports": [
                    {"name": port_name, "port": port, "targetPort": port_name, "protocol": "TCP"}
                    for port_name, port in component.ports.items()
                ],
            },
        }

    # ---- container pieces -----------------------------------------------------------------------------------

    def env(self, values: dict[str, str], *, with_token: bool) -> list[Manifest]:
        """POD_IP from the downward API first, so later values can reference it as $(POD_IP)."""
        env: list[Manifest] = [
            {"name": env_names.POD_IP, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
        ]
        if with_token and self.token_from_secret:
            secret = {"secretKeyRef": {"name": TOKEN_SECRET, "key": TOKEN_KEY}}
            env.append({"name": env_names.CONTROLLER_TOKEN, "valueFrom": secret})
        env += ({"name": name, "value": value} for name, value in values.items() if name != env_names.POD_IP)
        return env

    def probes(self, component: Component) -> Manifest:
        settings = {
            "startup": {"periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 100},
            "readiness": {"periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 3},
            "liveness": {"periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 5},
        }
        return {
            f"{probe.kind}Probe": {
                "httpGet": {"path": probe.path, "port": probe.port},
                **settings[probe.kind],
            }
            for probe in component.probes
        }

    def accelerator_resources(self, count: int) -> Manifest | None:
        resource = accelerator_resource(self.deploy.hardware_type)
        if resource is None or count <= 0:
            return None
        return {"requests": {resource: count}, "limits": {resource: count}}

    def config_volume(self) -> Manifest:
        return {"name": "config", "configMap": {"name": CONFIG_MAP}}

    def weight_volume(self) -> Manifest:
        return {"name": "weight", "hostPath": {"path": self.deploy.weight_mount_path}}

    def weight_mount(self) -> Manifest:
        return {"name": "weight", "mountPath": self.deploy.weight_mount_path, "readOnly": True}


def scrape_annotations(port: int) -> dict[str, str]:
    return {"prometheus.io/scrape": "true", "prometheus.io/port": str(port), "prometheus.io/path": "/metrics"}


def _with_deploy_mode(user_text: str, deploy_mode: str) -> str:
    """A local config previewed as Kubernetes objects runs as multi_deployment in the cluster."""
    document = json.loads(user_text)
    document.setdefault("motor_deploy_config", {})["deploy_mode"] = deploy_mode
    return json.dumps(document, indent=2) + "\n"
