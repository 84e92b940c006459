"""What every pod of a job is allowed: security contexts, resources, and who may reach it on the network.

- Security: seccomp RuntimeDefault, no privilege escalation, every capability dropped, no service-account token
  (only the planner calls the Kubernetes API; its pod gets the token of the ServiceAccount rbac.py binds). motor's own processes (controller, coordinator, pool master) run as
  NON_ROOT_UID on a read-only root filesystem, writing only to emptyDirs (their run directory and /tmp).
  Engine pods run the engine, which writes caches (vLLM, torch, Triton, CANN) under HOME and the working
  directory, so their root filesystem stays writable; they run as NON_ROOT_UID too except on Ascend
  hardware, whose driver stack and CANN logs need root (`motor.config.hardware.engines_as_root`).
- Resources: control components request CPU and memory and are memory-limited (`CONTROL_RESOURCES`); the
  coordinator's scale with its inference workers. Engine pods request their accelerators; their memory
  depends on the model, so it is not limited here, and /dev/shm is a memory-backed emptyDir of
  `motor_deploy_config.dshm_size`.
- Network: only the coordinator's inference port is reachable from outside the job; every other port
  (engines, pool master, node managers, controller, the coordinator's management port) only from the job's
  own pods, selected by label. Kubelet probes are not subject to NetworkPolicies.
"""

from dataclasses import dataclass
from typing import Any

from motor.deploy.k8s.labels import JOB_LABEL, PART_OF

Manifest = dict[str, Any]

NON_ROOT_UID = 1000
TMP_DIR = "/tmp"
SHM_DIR = "/dev/shm"
INTERNAL_POLICY = "motor-internal"
API_POLICY = "motor-coordinator-api"


@dataclass(frozen=True)
class Resources:
    cpu: str
    memory: str
    memory_limit: str

    def scaled(self, factor: int) -> "Resources":
        return Resources(
            f"{milli_cpu(self.cpu) * factor}m",
            f"{mebi(self.memory) * factor}Mi",
            f"{mebi(self.memory_limit) * factor}Mi",
        )

    def manifest(self) -> Manifest:
        # No CPU limit: throttling a router or a control loop costs latency; memory is what must be bounded.
        return {
            "requests": {"cpu": self.cpu, "memory": self.memory},
            "limits": {"memory": self.memory_limit},
        }


CONTROL_RESOURCES = {
    "controller": Resources("100m", "128Mi", "512Mi"),
    "coordinator": Resources("500m", "256Mi", "1024Mi"),  # per inference worker
    "planner": Resources("100m", "128Mi", "512Mi"),
    "kv_pool": Resources("500m", "512Mi", "4096Mi"),
}


def milli_cpu(cpu: str) -> int:
    return int(cpu[:-1]) if cpu.endswith("m") else int(float(cpu) * 1000)


def mebi(memory: str) -> int:
    return int(memory.removesuffix("Mi"))


def pod_security(*, as_root: bool) -> Manifest:
    context: Manifest = {"seccompProfile": {"type": "RuntimeDefault"}}
    if not as_root:
        context.update(
            runAsNonRoot=True, runAsUser=NON_ROOT_UID, runAsGroup=NON_ROOT_UID, fsGroup=NON_ROOT_UID
        )
    return context


def container_security(*, as_root: bool, read_only_root: bool) -> Manifest:
    context: Manifest = {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": read_only_root,
    }
    if not as_root:
        context["runAsNonRoot"] = True
    return context


def tmp_volume() -> tuple[Manifest, Manifest]:
    return {"name": "tmp", "emptyDir": {}}, {"name": "tmp", "mountPath": TMP_DIR}


def shm_volume(size: str) -> tuple[Manifest, Manifest]:
    return (
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": size}},
        {"name": "dshm", "mountPath": SHM_DIR},
    )


def network_policies(
    metadata: Any, job_id: str, api_selector: dict[str, str], infer_port: int
) -> list[Manifest]:
    """`metadata(name)` builds an object's metadata; `api_selector` selects the pod serving the inference API."""
    own_pods = {"matchLabels": {JOB_LABEL: job_id, PART_OF: "motor"}}
    return [
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": metadata(INTERNAL_POLICY),
            "spec": {
                "podSelector": own_pods,
                "policyTypes": ["Ingress"],
                "ingress": [{"from": [{"podSelector": own_pods}]}],
            },
        },
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": metadata(API_POLICY),
            "spec": {
                "podSelector": {"matchLabels": api_selector},
                "policyTypes": ["Ingress"],
                "ingress": [{"ports": [{"protocol": "TCP", "port": infer_port}]}],
            },
        },
    ]
