"""What every Kubernetes object builder reads: the plan, its topology and config texts, and the values derived
from them once (the config hash, the image, whether engines run as root)."""

import hashlib
from dataclasses import dataclass
from typing import Any

from motor.config.hardware import engines_as_root
from motor.config.models import DeployConfig
from motor.config.topology import Topology
from motor.deploy.k8s.labels import JOB_LABEL, NAME_LABEL, owner_labels
from motor.deploy.plan import Plan

Manifest = dict[str, Any]

# The image of a local config previewed as Kubernetes objects; Kubernetes deploy modes must name theirs.
PREVIEW_IMAGE = "motor:latest"


@dataclass(frozen=True)
class ConfigTexts:
    """The config pair exactly as the user wrote it: stored in the ConfigMap and used as the update baseline."""

    user: str
    env: str


@dataclass(frozen=True)
class ManifestContext:
    """Made by `ManifestContext.of`, which derives the fields after `texts` from the first three."""

    plan: Plan
    topology: Topology
    texts: ConfigTexts
    deploy: DeployConfig
    config_hash: str
    image: str
    engines_as_root: bool

    @classmethod
    def of(cls, plan: Plan, topology: Topology, texts: ConfigTexts) -> "ManifestContext":
        deploy = topology.user.motor_deploy_config
        return cls(
            plan=plan,
            topology=topology,
            texts=texts,
            deploy=deploy,
            config_hash=hashlib.sha256(f"{texts.user}\0{texts.env}".encode()).hexdigest(),
            image=deploy.image_name or PREVIEW_IMAGE,
            engines_as_root=engines_as_root(deploy.hardware_type),
        )

    @property
    def namespace(self) -> str:
        return self.plan.job_id

    def metadata(self, name: str, labels: dict[str, str] | None = None) -> Manifest:
        return {
            "name": name,
            "namespace": self.namespace,
            "labels": {**owner_labels(self.plan.job_id), **(labels or {})},
        }

    def selector(self, name: str) -> dict[str, str]:
        """The pods of the job named `name` (their `app.kubernetes.io/name`)."""
        return {JOB_LABEL: self.plan.job_id, NAME_LABEL: name}

    def job_selector(self) -> dict[str, str]:
        return {JOB_LABEL: self.plan.job_id}
