"""Kubernetes objects from a Plan: pure dictionaries, grouped into files.

Layout (namespace = job_id): ConfigMap `motor-config` (user_config.json and env.json with their credentials
replaced by markers, and every component's spec, mounted at the plan's config_dir); the Secrets of
secrets.py (the generated controller token, the config's credentials); for deploy_mode multi_deployment one
Deployment per component (+ Services: the controller, the pool master, the coordinator's inference port and,
apart, its management port), node managers getting one Deployment per engine instance with replicas = pods
per instance. single_container puts every component in one pod (see single_container.py). Every pod is
hardened as hardening.py says (security context, resources, no service-account token: motor calls no
Kubernetes API) and NetworkPolicies keep everything but the inference port inside the job. Monitoring
(monitoring.py): pod templates carry the `prometheus.io/scrape|port|path` annotations, a ConfigMap holds the
Grafana dashboard, and `prometheus_operator=True` adds a PodMonitor and a PrometheusRule. Every object carries
the owner labels (labels.py) plus its component's labels, so the whole job can be found and deleted by label.
"""

import hashlib
import json
import secrets
from dataclasses import dataclass
from typing import Any

from motor.config.hardware import accelerator_resource, engines_as_root
from motor.config.topology import Topology
from motor.deploy.k8s import hardening
from motor.deploy.k8s.labels import (
    COMPONENT_LABEL,
    CONFIG_HASH_ANNOTATION,
    CONFIG_MAP,
    INDEX_LABEL,
    JOB_LABEL,
    NAME_LABEL,
    ROLE_LABEL,
    owner_labels,
)
from motor.deploy.k8s.monitoring import dashboard_config_map, operator_objects
from motor.deploy.k8s.secrets import (
    GENERATED_ANNOTATION,
    redact_env_config,
    redact_user_config,
    tls_mounts,
    tls_of,
    tls_volume,
    tls_volume_mount,
)
from motor.deploy.k8s.single_container import NAME as SINGLE_CONTAINER
from motor.deploy.k8s.single_container import single_container_objects
from motor.deploy.plan import (
    CONTROLLER,
    COORDINATOR,
    COORDINATOR_MGMT,
    CREDENTIALS_SECRET,
    INSTANCE_CREDENTIALS_SECRET,
    TOKEN_KEY,
    TOKEN_SECRET,
    Component,
    Plan,
    Probe,
    SecretEnv,
)
from motor.deploy.prometheus import component_endpoints
from motor.protocol import env as env_names
from motor.protocol.credentials import instance_credential
from motor.protocol.specs import HOST_PLACEHOLDER, NodeManagerSpec, TlsFiles

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
    groups.append(("config", [context.config_map(), *context.secrets(token or secrets.token_urlsafe(32))]))
    if plan.deploy_mode == "single_container":
        groups.append(("single-container", single_container_objects(context)))
        pod_of = {component.name: SINGLE_CONTAINER for component in plan.components}
    else:
        for component in plan.components:
            groups.append((component.name, context.component_objects(component)))
        pod_of = {component.name: component.name for component in plan.components}
    groups.append(("network", context.network_policies(pod_of[COORDINATOR])))
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
        self.image = self.deploy.image_name or PREVIEW_IMAGE
        self.engines_as_root = engines_as_root(self.deploy.hardware_type)

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
        data = {
            "user_config.json": redact_user_config(user_text),
            "env.json": redact_env_config(self.texts.env),
            **self.plan.files,
        }
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": self.metadata(CONFIG_MAP), "data": data}

    def secrets(self, token: str) -> list[Manifest]:
        """The generated token Secret when a component needs it, the Secrets built from the config, and the
        node managers' instance credentials derived from the controller's token (env.json's, else `token`)."""
        objects = []
        if any(item.secret == TOKEN_SECRET for c in self.plan.components for item in c.secret_env):
            token_secret = self.secret(TOKEN_SECRET, {TOKEN_KEY: token})
            token_secret["metadata"]["annotations"] = {GENERATED_ANNOTATION: "true"}
            objects.append(token_secret)
        objects += [self.secret(name, data) for name, data in sorted(self.plan.secrets.items())]
        instances = [
            item.key
            for component in self.plan.node_managers
            for item in component.secret_env
            if item.secret == INSTANCE_CREDENTIALS_SECRET
        ]
        if instances:
            controller_token = self.controller_token(token)
            credentials = {key: instance_credential(controller_token, key) for key in instances}
            objects.append(self.secret(INSTANCE_CREDENTIALS_SECRET, credentials))
        return objects

    def controller_token(self, generated: str) -> str:
        """The token the controller runs with: env.json's (in the credentials Secret) or the generated one."""
        for item in self.plan.component(CONTROLLER).secret_env:
            if item.env == env_names.CONTROLLER_TOKEN and item.secret == CREDENTIALS_SECRET:
                return self.plan.secrets[CREDENTIALS_SECRET][item.key]
        return generated

    def secret(self, name: str, data: dict[str, str]) -> Manifest:
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": self.metadata(name),
            "type": "Opaque",
            "stringData": dict(data),
        }

    def network_policies(self, api_pod: str) -> list[Manifest]:
        infer_port = self.plan.component(COORDINATOR).ports["infer"]
        return hardening.network_policies(self.metadata, self.plan.job_id, self.selector(api_pod), infer_port)

    # ---- per component --------------------------------------------------------------------------------------

    def component_objects(self, component: Component) -> list[Manifest]:
        return [self.deployment(component), *self.services(component, component.name)]

    def services(self, component: Component, pod_name: str) -> list[Manifest]:
        """The controller's and the pool master's ports; the coordinator's inference port, and its management
        port apart on a Service of its own (clients never need it)."""
        labels = self.component_labels(component)
        if component.kind == "coordinator":
            return [
                self.service(COORDINATOR, {"infer": component.ports["infer"]}, labels, pod_name),
                self.service(COORDINATOR_MGMT, {"mgmt": component.ports["mgmt"]}, labels, pod_name),
            ]
        if component.kind in SERVICE_COMPONENTS:
            return [self.service(component.name, component.ports, labels, pod_name)]
        return []

    def deployment(self, component: Component) -> Manifest:
        labels = self.component_labels(component)
        engine_host = component.kind == "node_manager"
        as_root = engine_host and self.engines_as_root
        read_only_root = not engine_host or _engine_type(component) == "sim"
        env = dict(component.env)
        if not as_root:
            env.setdefault("HOME", hardening.TMP_DIR)  # caches of a user without a home directory
        tmp_volume, tmp_mount = hardening.tmp_volume()
        mounts = [
            {"name": "config", "mountPath": self.plan.config_dir, "readOnly": True},
            {"name": "run", "mountPath": component.env[env_names.RUN_DIR]},
            tmp_mount,
        ]
        volumes: list[Manifest] = [self.config_volume(), {"name": "run", "emptyDir": {}}, tmp_volume]
        for mount in tls_mounts([component.spec]):
            volumes.append(tls_volume(mount))
            mounts.append(tls_volume_mount(mount))
        container: Manifest = {
            "name": component.kind.replace("_", "-"),
            "image": self.image,
            "imagePullPolicy": "IfNotPresent",
            "command": list(component.argv),
            "env": self.env(env, component.secret_env),
            "ports": [
                {"name": name, "containerPort": port, "protocol": "TCP"}
                for name, port in component.ports.items()
            ],
            **self.probes(component),
            "volumeMounts": mounts,
            "securityContext": hardening.container_security(as_root=as_root, read_only_root=read_only_root),
        }
        if engine_host:
            shm_volume, shm_mount = hardening.shm_volume(self.deploy.dshm_size)
            container["volumeMounts"] += [self.weight_mount(), shm_mount]
            volumes += [self.weight_volume(), shm_volume]
            resources = self.accelerator_resources(component.accelerators)
            if resources:
                container["resources"] = resources
        else:
            container["resources"] = self.control_resources(component.kind).manifest()
        pod_spec: Manifest = {
            "automountServiceAccountToken": False,
            "securityContext": hardening.pod_security(as_root=as_root),
            "containers": [container],
            "volumes": volumes,
        }
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

    def control_resources(self, kind: str) -> hardening.Resources:
        resources = hardening.CONTROL_RESOURCES[kind]
        if kind == "coordinator":
            return resources.scaled(
                self.topology.user.motor_coordinator_config.inference_workers_config.num_workers
            )
        return resources

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

    def service(self, name: str, ports: dict[str, int], labels: dict[str, str], pod_name: str) -> Manifest:
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": self.metadata(name, labels),
            "spec": {
                "type": "ClusterIP",
                "selector": self.selector(pod_name),
                "ports": [
                    {"name": port_name, "port": port, "targetPort": port_name, "protocol": "TCP"}
                    for port_name, port in ports.items()
                ],
            },
        }

    # ---- container pieces -----------------------------------------------------------------------------------

    def env(self, values: dict[str, str], secret_env: tuple[SecretEnv, ...]) -> list[Manifest]:
        """POD_IP from the downward API first, so later values can reference it as $(POD_IP); credentials from
        their Secrets, never as values."""
        env: list[Manifest] = [
            {"name": env_names.POD_IP, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
        ]
        env += (
            {"name": item.env, "valueFrom": {"secretKeyRef": {"name": item.secret, "key": item.key}}}
            for item in secret_env
        )
        env += ({"name": name, "value": value} for name, value in values.items() if name != env_names.POD_IP)
        return env

    def probes(self, component: Component) -> Manifest:
        settings = {
            "startup": {"periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 100},
            "readiness": {"periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 3},
            "liveness": {"periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 5},
        }
        tls = dict(tls_of(component.spec)).get("mgmt")
        return {
            f"{probe.kind}Probe": {**self.probe_action(component, probe, tls), **settings[probe.kind]}
            for probe in component.probes
        }

    def probe_action(self, component: Component, probe: Probe, tls: TlsFiles | None) -> Manifest:
        """An HTTP GET by kubelet, or with TLS motor's exec probe: kubelet presents no client certificate."""
        if probe.scheme != "https" or tls is None:
            return {"httpGet": {"path": probe.path, "port": probe.port}}
        url = f"https://{HOST_PLACEHOLDER}:{component.ports[probe.port]}{probe.path}"
        options = [
            word
            for name, path in tls.model_dump(exclude_none=True).items()
            for word in (f"--{name.replace('_', '-')}", path)
        ]
        return {"exec": {"command": [component.argv[0], "-m", "motor.runtime.probe", url, *options]}}

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


def _engine_type(component: Component) -> str | None:
    return component.spec.engine.engine_type if isinstance(component.spec, NodeManagerSpec) else None


def scrape_annotations(port: int) -> dict[str, str]:
    return {"prometheus.io/scrape": "true", "prometheus.io/port": str(port), "prometheus.io/path": "/metrics"}


def _with_deploy_mode(user_text: str, deploy_mode: str) -> str:
    """A local config previewed as Kubernetes objects runs as multi_deployment in the cluster."""
    document = json.loads(user_text)
    document.setdefault("motor_deploy_config", {})["deploy_mode"] = deploy_mode
    return json.dumps(document, indent=2) + "\n"
