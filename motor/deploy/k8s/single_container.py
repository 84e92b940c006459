"""deploy_mode single_container: every component in one pod, started by a small POSIX shell supervisor.

The container runs the same entry points as local mode, each as a background process. Variables all
components share go on the container (Kubernetes expands $(POD_IP) in them); each component's own variables go
on its command line. When any component exits the script stops the others and exits non-zero, so Kubernetes
restarts the pod instead of leaving it half alive.
"""

import shlex
from typing import TYPE_CHECKING, Any

from motor.deploy.k8s.labels import COMPONENT_LABEL, CONTROLLER_ACCOUNT, NAME_LABEL
from motor.deploy.plan import COORDINATOR, POD_IP_REF, Component
from motor.deploy.prometheus import component_endpoints
from motor.protocol import env as env_names

if TYPE_CHECKING:
    from motor.deploy.k8s.manifests import ManifestContext

NAME = "single-container"


def single_container_objects(context: "ManifestContext") -> list[dict[str, Any]]:
    plan = context.plan
    shared = shared_env(plan.components)
    container: dict[str, Any] = {
        "name": "motor",
        "image": context.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", supervisor_script(plan.components, shared)],
        "env": context.env(shared, with_token=True),
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
        **context.probes(plan.component(COORDINATOR)),
        "volumeMounts": [
            {"name": "config", "mountPath": plan.config_dir, "readOnly": True},
            {"name": "run", "mountPath": plan.run_dir},
            context.weight_mount(),
        ],
    }
    resources = context.accelerator_resources(sum(c.accelerators for c in plan.node_managers))
    if resources:
        container["resources"] = resources
    pod_spec = {
        "serviceAccountName": CONTROLLER_ACCOUNT,
        "containers": [container],
        "volumes": [context.config_volume(), {"name": "run", "emptyDir": {}}, context.weight_volume()],
    }
    labels = {NAME_LABEL: NAME, COMPONENT_LABEL: NAME}
    coordinator = plan.component(COORDINATOR)
    return [
        context.deployment_object(
            NAME, labels, 1, pod_spec, recreate=True, metrics_port=coordinator.ports["mgmt"]
        ),
        context.service(COORDINATOR, coordinator, context.component_labels(coordinator), selector_name=NAME),
    ]


def shared_env(components: tuple[Component, ...]) -> dict[str, str]:
    """The variables every component sets to the same value."""
    first, *rest = components
    return {name: value for name, value in first.env.items() if all(c.env.get(name) == value for c in rest)}


def supervisor_script(components: tuple[Component, ...], shared: dict[str, str]) -> str:
    lines = [
        "set -u",
        'pids=""',
        'stop() { for entry in $pids; do kill "${entry##*:}" 2>/dev/null; done; }',
        "trap 'stop; exit 0' TERM INT",
        'start() { name=$1; shift; "$@" & pids="$pids $name:$!"; }',
    ]
    for component in components:
        own = {name: value for name, value in component.env.items() if shared.get(name) != value}
        words = [
            "start",
            shlex.quote(component.name),
            "env",
            *(f"{name}={_shell_word(value)}" for name, value in own.items()),
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


def _shell_word(value: str) -> str:
    """Quote for sh, turning the Kubernetes reference $(POD_IP) into the shell's "$POD_IP"."""
    return '"$POD_IP"'.join(shlex.quote(part) for part in value.split(POD_IP_REF))
