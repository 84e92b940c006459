"""deploy_mode multi_deployment: one Deployment per component (node managers: one per engine instance, with
replicas = pods per instance) and the Services of the components clients or other pods reach."""

from motor.deploy.k8s import hardening
from motor.deploy.k8s.context import Manifest, ManifestContext
from motor.deploy.k8s.pod_parts import (
    accelerator_resources,
    config_volume,
    container_env,
    control_resources,
    probes,
    weight_mount,
    weight_volume,
)
from motor.deploy.k8s.rbac import PLANNER_ACCOUNT
from motor.deploy.k8s.secrets import tls_mounts, tls_volume, tls_volume_mount
from motor.deploy.k8s.workloads import component_labels, component_services, deployment
from motor.deploy.plan import Component
from motor.deploy.prometheus import component_endpoints
from motor.protocol import env as env_names
from motor.protocol.specs import CoordinatorSpec, NodeManagerSpec


def component_objects(context: ManifestContext, component: Component) -> list[Manifest]:
    return [component_deployment(context, component), *component_services(context, component, component.name)]


def component_deployment(context: ManifestContext, component: Component) -> Manifest:
    labels = component_labels(component)
    engine_host = component.kind == "node_manager"
    as_root = engine_host and context.engines_as_root
    read_only_root = not engine_host or _engine_type(component) == "sim"
    env = dict(component.env)
    if not as_root:
        env.setdefault("HOME", hardening.TMP_DIR)  # caches of a user without a home directory
    tmp_volume, tmp_mount = hardening.tmp_volume()
    mounts = [
        {"name": "config", "mountPath": context.plan.config_dir, "readOnly": True},
        {"name": "run", "mountPath": component.env[env_names.RUN_DIR]},
        tmp_mount,
    ]
    volumes: list[Manifest] = [config_volume(), {"name": "run", "emptyDir": {}}, tmp_volume]
    for mount in tls_mounts([component.spec]):
        volumes.append(tls_volume(mount))
        mounts.append(tls_volume_mount(mount))
    container: Manifest = {
        "name": component.kind.replace("_", "-"),
        "image": context.image,
        "imagePullPolicy": "IfNotPresent",
        "command": list(component.argv),
        "env": container_env(env, component.secret_env),
        "ports": [
            {"name": name, "containerPort": port, "protocol": "TCP"} for name, port in component.ports.items()
        ],
        **probes(component),
        "volumeMounts": mounts,
        "securityContext": hardening.container_security(as_root=as_root, read_only_root=read_only_root),
    }
    if engine_host or _loads_tokenizer(component):
        container["volumeMounts"].append(weight_mount(context))
        volumes.append(weight_volume(context))
    if engine_host:
        shm_volume, shm_mount = hardening.shm_volume(context.deploy.dshm_size)
        container["volumeMounts"].append(shm_mount)
        volumes.append(shm_volume)
        resources = accelerator_resources(context, component.accelerators)
        if resources:
            container["resources"] = resources
    else:
        container["resources"] = control_resources(context, component.kind).manifest()
    pod_spec: Manifest = {
        "automountServiceAccountToken": False,
        "securityContext": hardening.pod_security(as_root=as_root),
        "containers": [container],
        "volumes": volumes,
    }
    if component.kind == "planner":  # it scales the job through the Kubernetes API (rbac.py)
        pod_spec.update(automountServiceAccountToken=True, serviceAccountName=PLANNER_ACCOUNT)
    # Accelerator pods and the single pool master must not overlap during a rollout.
    recreate = component.kind in ("node_manager", "kv_pool")
    return deployment(
        context,
        component.name,
        labels,
        component.replicas,
        pod_spec,
        recreate,
        metrics_port=component_endpoints(component)[0].port,
    )


def _loads_tokenizer(component: Component) -> bool:
    """A coordinator under kv_cache_affinity with vLLM engines loads their tokenizer from the model directory,
    which it reads from the weights' host path as the engines do."""
    spec = component.spec
    return (
        isinstance(spec, CoordinatorSpec)
        and spec.kv_index is not None
        and spec.kv_index.model_path is not None
    )


def _engine_type(component: Component) -> str | None:
    return component.spec.engine.engine_type if isinstance(component.spec, NodeManagerSpec) else None
