"""The pieces every motor pod is built from, whether it runs one component or all of them: the container's
environment and probes, its resources, and the config and weight volumes."""

from motor.config.hardware import accelerator_resource
from motor.deploy.k8s import hardening
from motor.deploy.k8s.context import Manifest, ManifestContext
from motor.deploy.k8s.labels import CONFIG_MAP
from motor.deploy.k8s.secrets import tls_of
from motor.deploy.plan import Component, Probe, SecretEnv
from motor.protocol import env as env_names
from motor.protocol.specs import HOST_PLACEHOLDER, TlsFiles

PROBE_SETTINGS = {
    "startup": {"periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 100},
    "readiness": {"periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 3},
    "liveness": {"periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 5},
}


def container_env(values: dict[str, str], secret_env: tuple[SecretEnv, ...]) -> list[Manifest]:
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


def probes(component: Component) -> Manifest:
    tls = dict(tls_of(component.spec)).get("mgmt")
    return {
        f"{probe.kind}Probe": {**_probe_action(component, probe, tls), **PROBE_SETTINGS[probe.kind]}
        for probe in component.probes
    }


def _probe_action(component: Component, probe: Probe, tls: TlsFiles | None) -> Manifest:
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


def accelerator_resources(context: ManifestContext, count: int) -> Manifest | None:
    resource = accelerator_resource(context.deploy.hardware_type)
    if resource is None or count <= 0:
        return None
    return {"requests": {resource: count}, "limits": {resource: count}}


def control_resources(context: ManifestContext, kind: str) -> hardening.Resources:
    resources = hardening.CONTROL_RESOURCES[kind]
    if kind == "coordinator":
        return resources.scaled(
            context.topology.user.motor_coordinator_config.inference_workers_config.num_workers
        )
    return resources


def config_volume() -> Manifest:
    return {"name": "config", "configMap": {"name": CONFIG_MAP}}


def weight_volume(context: ManifestContext) -> Manifest:
    return {"name": "weight", "hostPath": {"path": context.deploy.weight_mount_path}}


def weight_mount(context: ManifestContext) -> Manifest:
    return {"name": "weight", "mountPath": context.deploy.weight_mount_path, "readOnly": True}
