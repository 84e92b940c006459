"""deploy_mode single_container: every component in one pod, started by a small POSIX shell supervisor.

The container runs the same entry points as local mode, each as a background process. Variables all
components share go on the container (Kubernetes expands $(POD_IP) in them); each component's own variables go
on its command line. Credentials reach the container from their Secrets, and each component's line unsets the
ones it does not use (`env -u`): the engines never see the etcd password or the API keys. When any component
exits the script stops the others and exits non-zero, so Kubernetes restarts the pod instead of leaving it half
alive. The pod runs the engines, so it is hardened as an engine pod is (hardening.py).
"""

import re
import shlex

from motor.deploy.k8s import hardening
from motor.deploy.k8s.context import Manifest, ManifestContext
from motor.deploy.k8s.labels import COMPONENT_LABEL, NAME_LABEL
from motor.deploy.k8s.pod_parts import (
    accelerator_resources,
    config_volume,
    container_env,
    control_resources,
    probes,
    weight_mount,
    weight_volume,
)
from motor.deploy.k8s.secrets import tls_mounts, tls_volume, tls_volume_mount
from motor.deploy.k8s.workloads import component_services, deployment
from motor.deploy.plan import COORDINATOR, POD_IP_REF, Component, SecretEnv
from motor.deploy.prometheus import component_endpoints
from motor.protocol import env as env_names

NAME = "single-container"
_SHELL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def single_container_objects(context: ManifestContext) -> list[Manifest]:
    plan = context.plan
    shared = shared_env(plan.components)
    secret_env = pod_secret_env(plan.components)
    as_root = context.engines_as_root
    if not as_root:
        shared.setdefault("HOME", hardening.TMP_DIR)
    tmp_volume, tmp_mount = hardening.tmp_volume()
    shm_volume, shm_mount = hardening.shm_volume(context.deploy.dshm_size)
    mounts = tls_mounts(component.spec for component in plan.components)
    container: Manifest = {
        "name": "motor",
        "image": context.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", supervisor_script(plan.components, shared)],
        "env": container_env(shared, secret_env),
        "ports": [
            {"name": name, "containerPort": port, "protocol": "TCP"}
            for component in plan.components
            if component.kind != "node_manager"
            for name, port in component.ports.items()
        ]
        # the engine hosts' metrics ports, unnamed (names would repeat), so a PodMonitor can address them
        + [
            {"containerPort": endpoint.port, "protocol": "TCP"}
            for component in plan.node_managers
            for endpoint in component_endpoints(component)
        ],
        **probes(plan.component(COORDINATOR)),
        "volumeMounts": [
            {"name": "config", "mountPath": plan.config_dir, "readOnly": True},
            {"name": "run", "mountPath": plan.run_dir},
            tmp_mount,
            shm_mount,
            weight_mount(context),
            *(tls_volume_mount(mount) for mount in mounts),
        ],
        "securityContext": hardening.container_security(as_root=as_root, read_only_root=False),
    }
    container["resources"] = pod_resources(context)
    pod_spec = {
        "automountServiceAccountToken": False,
        "securityContext": hardening.pod_security(as_root=as_root),
        "containers": [container],
        "volumes": [
            config_volume(),
            {"name": "run", "emptyDir": {}},
            tmp_volume,
            shm_volume,
            weight_volume(context),
            *(tls_volume(mount) for mount in mounts),
        ],
    }
    labels = {NAME_LABEL: NAME, COMPONENT_LABEL: NAME}
    coordinator = plan.component(COORDINATOR)
    return [
        deployment(context, NAME, labels, 1, pod_spec, recreate=True, metrics_port=coordinator.ports["mgmt"]),
        *component_services(context, coordinator, NAME),
    ]


def pod_resources(context: ManifestContext) -> Manifest:
    """The accelerators of every engine, and the control components' CPU and memory as requests (the
    engines share the pod's memory, so it is not limited)."""
    requests: Manifest = {}
    limits: Manifest = {}
    accelerators = accelerator_resources(context, sum(c.accelerators for c in context.plan.node_managers))
    if accelerators:
        requests.update(accelerators["requests"])
        limits.update(accelerators["limits"])
    control = [c.kind for c in context.plan.components if c.kind != "node_manager"]
    cpu = sum(hardening.milli_cpu(control_resources(context, kind).cpu) for kind in control)
    memory = sum(hardening.mebi(control_resources(context, kind).memory) for kind in control)
    requests.update(cpu=f"{cpu}m", memory=f"{memory}Mi")
    return {"requests": requests, **({"limits": limits} if limits else {})}


def pod_secret_env(components: tuple[Component, ...]) -> tuple[SecretEnv, ...]:
    """Every credential any component takes, once: one container has one environment."""
    found: dict[str, SecretEnv] = {}
    for component in components:
        for item in component.secret_env:
            if found.setdefault(item.env, item) != item:
                raise ValueError(
                    f"env.json gives {item.env} different values for different components; with deploy_mode "
                    "single_container every component shares one container environment: give it one value"
                )
    return tuple(found.values())


def shared_env(components: tuple[Component, ...]) -> dict[str, str]:
    """The variables every component sets to the same value."""
    first, *rest = components
    return {name: value for name, value in first.env.items() if all(c.env.get(name) == value for c in rest)}


def supervisor_script(components: tuple[Component, ...], shared: dict[str, str]) -> str:
    credentials = {item.env for component in components for item in component.secret_env}
    lines = [
        "set -u",
        'pids=""',
        'stop() { for entry in $pids; do kill "${entry##*:}" 2>/dev/null; done; }',
        "trap 'stop; exit 0' TERM INT",
        'start() { name=$1; shift; "$@" & pids="$pids $name:$!"; }',
    ]
    for component in components:
        own = {name: value for name, value in component.env.items() if shared.get(name) != value}
        unused = sorted(credentials - {item.env for item in component.secret_env})
        words = [
            "start",
            shlex.quote(component.name),
            "env",
            *(f"-u {_checked_name(name)}" for name in unused),
            *(f"{_checked_name(name)}={_shell_word(value)}" for name, value in own.items()),
            *(shlex.quote(arg) for arg in component.argv),
        ]
        lines.append(f"mkdir -p {_shell_word(component.env[env_names.RUN_DIR])}")
        lines.append(" ".join(words))
    lines += [
        "while :; do",
        "  for entry in $pids; do",
        '    if ! kill -0 "${entry##*:}" 2>/dev/null; then',
        '      echo "motor: ${entry%%:*} exited; stopping every component" >&2',
        "      stop",
        "      exit 1",
        "    fi",
        "  done",
        "  sleep 2",
        "done",
    ]
    return "\n".join(lines) + "\n"


def _checked_name(name: str) -> str:
    """An environment variable name as a shell word: only identifiers (the config refuses other names)."""
    if not _SHELL_NAME.match(name):
        raise ValueError(f"{name!r} is not an environment variable name the container's shell accepts")
    return name


def _shell_word(value: str) -> str:
    """Quote for sh, turning the Kubernetes reference $(POD_IP) into the shell's "$POD_IP"."""
    return '"$POD_IP"'.join(shlex.quote(part) for part in value.split(POD_IP_REF))
