"""Kubernetes operations on a job: deploy, update the config in place, scale instances, status, delete.

Each returns what it did (the dataclasses below: objects applied or deleted, and every object that failed with
its `KubeError`) or raises a motor.deploy.errors.DeployError; it prints nothing: motor.cli shows the results.
The deployed ConfigMap (`motor-config`) holds the config pair as written and is the baseline that
`--update-config` and `--update-instance-num` compare against.
"""

import hashlib
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from motor.config import ConfigError, load_documents
from motor.config.planner import COUNT_KEYS
from motor.config.topology import Topology
from motor.config.whitelist import (
    INSTANCE_COUNT_KEYS,
    SCALE_WHITELIST,
    UPDATE_WHITELIST,
    WhitelistTree,
    changed_paths,
    refused_changes,
)
from motor.deploy.errors import DeployError, Refused
from motor.deploy.k8s.apply import ApplyResult, apply_objects
from motor.deploy.k8s.client import DELETE_ORDER, OPTIONAL_KINDS, KubeClient, KubeError, Manifest
from motor.deploy.k8s.labels import CONFIG_MAP, MANAGED_BY, NAME_LABEL, owner_labels
from motor.deploy.k8s.manifests import ConfigTexts, ManifestFile, build_manifests
from motor.deploy.k8s.secrets import redact_env_config, redact_user_config, secret_data
from motor.deploy.plan import (
    CONTROLLER,
    COORDINATOR,
    CREDENTIALS_SECRET,
    INSTANCE_CREDENTIALS_SECRET,
    TOKEN_KEY,
    TOKEN_SECRET,
    Plan,
    build_plan,
)


@dataclass(frozen=True)
class Applied:
    """Objects applied (`summary` says what the operation did); failed when any object failed."""

    summary: str
    result: ApplyResult

    @property
    def ok(self) -> bool:
        return self.result.ok


@dataclass(frozen=True)
class Unchanged:
    """An update (or a scale, `scale`) that found nothing to change in the deployed job."""

    namespace: str
    scale: bool


@dataclass(frozen=True)
class Rolled:
    """How the components that read the updated ConfigMap get it: the Deployments rolled to `revision` (and
    those that failed), or, when every component runs in one pod, that pod to restart by hand."""

    revision: str
    rolled: list[str] = field(default_factory=list)
    failures: list[KubeError] = field(default_factory=list)
    restart_pod: str | None = None
    waiting: list[str] = field(default_factory=list)  # changes that wait for the engine pods' next restart


@dataclass(frozen=True)
class ConfigUpdated:
    applied: Applied
    rolled: Rolled | None  # None when the ConfigMap could not be applied


@dataclass(frozen=True)
class Deleted:
    job_id: str
    namespace: str
    deleted: list[str]
    failures: list[KubeError]
    kept_namespace: bool  # asked to delete the namespace, but motor did not create it


@dataclass(frozen=True)
class DeploymentRow:
    name: str
    component: str
    role: str
    ready: str  # ready/wanted replicas
    image: str


@dataclass(frozen=True)
class Status:
    job_id: str
    namespace: str
    deployments: list[DeploymentRow]  # empty: the job has none in the namespace


@dataclass(frozen=True)
class Job:
    """What an operation acts on: the plan, its topology and the config texts it came from."""

    plan: Plan
    topology: Topology
    texts: ConfigTexts
    create_namespace: bool = False
    prometheus_operator: bool = False
    token: str | None = None  # the controller token the instance credentials derive from (None: a fresh one)

    @property
    def namespace(self) -> str:
        return self.plan.job_id

    def manifests(self) -> list[ManifestFile]:
        return build_manifests(
            self.plan,
            self.topology,
            self.texts,
            create_namespace=self.create_namespace,
            token=self.token,
            prometheus_operator=self.prometheus_operator,
        )

    def objects(self) -> list[Manifest]:
        return [obj for manifest_file in self.manifests() for obj in manifest_file.objects]


def deploy(client: KubeClient, job: Job) -> Applied:
    job = _with_token(client, job)
    result = apply_objects(client, job.objects(), job.namespace)
    return Applied(f"deployed job {job.plan.job_id} to namespace {job.namespace}", result)


def _with_token(client: KubeClient, job: Job) -> Job:
    try:
        return with_cluster_token(client, job)
    except KubeError as exc:
        raise DeployError(f"failed {exc}") from exc


def with_cluster_token(client: KubeClient, job: Job) -> Job:
    """The job with the controller token its namespace already holds (the generated token Secret is never
    overwritten, so the node managers' instance credentials must derive from it), else a fresh one."""
    deployed = secret_data(client.get("Secret", job.namespace, TOKEN_SECRET)).get(TOKEN_KEY)
    return replace(job, token=deployed or job.token or secrets.token_urlsafe(32))


def update_config(client: KubeClient, job: Job) -> ConfigUpdated | Unchanged:
    """Re-apply only the ConfigMap, and only when every change is whitelisted."""
    baseline = _baseline(client, job.namespace, "--update-config")
    refused = _refused(job.texts, baseline, UPDATE_WHITELIST) + _changed_credentials(client, job)
    if refused:
        counts = any(path.rsplit(".", 1)[-1] in INSTANCE_COUNT_KEYS for path in refused)
        raise Refused(
            "refused: --update-config only changes settings that need no redeploy "
            "(log_level, coordinator exception_config and timeout_config); these changes need a redeploy:",
            details=refused,
            hint="change instance counts with --update-instance-num" if counts else None,
        )
    changed = changed_paths(json.loads(redact_user_config(job.texts.user)), json.loads(baseline.user))
    if not changed:
        return Unchanged(job.namespace, scale=False)
    result = apply_objects(client, [_config_map(job)], job.namespace)
    applied = Applied("updated ConfigMap/" + CONFIG_MAP + " (" + ", ".join(changed) + ")", result)
    return ConfigUpdated(applied, _roll_readers(client, job, changed) if applied.ok else None)


# Components read their compiled spec (in the ConfigMap) at start: after an update the Deployments whose
# section changed are rolled.
# Engine hosts are left alone (a node manager's log level waits for their next restart): rolling them restarts
# the engines.
ROLLED_SECTIONS = {"motor_controller_config": CONTROLLER, "motor_coordinator_config": COORDINATOR}
REVISION_ANNOTATION = "motor.io/config-revision"


def _roll_readers(client: KubeClient, job: Job, changed: list[str]) -> Rolled:
    names = sorted(
        {
            name
            for path in changed
            for section, name in ROLLED_SECTIONS.items()
            if path.startswith(f"{section}.")
        }
    )
    waiting = sorted(
        {path for path in changed if not path.startswith(tuple(f"{s}." for s in ROLLED_SECTIONS))}
    )
    revision = hashlib.sha256((job.texts.user + job.texts.env).encode()).hexdigest()[:16]
    if job.plan.deploy_mode != "multi_deployment":
        return Rolled(revision, restart_pod=job.plan.job_id)
    rolled: list[str] = []
    failures: list[KubeError] = []
    for name in names:
        patch = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": job.namespace},
            "spec": {"template": {"metadata": {"annotations": {REVISION_ANNOTATION: revision}}}},
        }
        try:
            client.merge_patch(patch)
            rolled.append(f"Deployment/{name}")
        except KubeError as exc:
            failures.append(exc)
    return Rolled(revision, rolled, failures, waiting=waiting)


def scale(client: KubeClient, job: Job) -> Applied | Unchanged:
    """Delete the instances the new counts drop (highest index first), then add only the new ones."""
    baseline = _baseline(client, job.namespace, "--update-instance-num")
    refused = _refused(job.texts, baseline, SCALE_WHITELIST) + _changed_credentials(client, job)
    if refused:
        raise Refused(
            "refused: --update-instance-num only changes "
            + ", ".join(sorted(INSTANCE_COUNT_KEYS))
            + "; these differ from the deployed config too:",
            details=refused,
        )
    return _scale(client, job, baseline)


def deployed_counts(client: KubeClient, namespace: str) -> dict[str, int]:
    """Prefill and decode instances of the deployed baseline (what `--update-instance-num` last applied)."""
    baseline = json.loads(_baseline(client, namespace, "--update-instance-num").user)
    deploy = baseline.get("motor_deploy_config") or {}
    return {role: deploy.get(key) or 0 for role, key in COUNT_KEYS.items()}


def scale_to(client: KubeClient, namespace: str, counts: Mapping[str, int]) -> Applied | Unchanged:
    """`scale` with the deployed baseline's counts changed to `counts` (the planner's scale path). Nothing but
    the counts differ from the baseline by construction, credentials included (the baseline keeps its markers,
    and a scale applies no Secret but the instance credentials)."""
    baseline = _baseline(client, namespace, "--update-instance-num")
    user = json.loads(baseline.user)
    for role, key in COUNT_KEYS.items():
        if role in counts:
            user.setdefault("motor_deploy_config", {})[key] = counts[role]
    try:
        topology = load_documents(user, json.loads(baseline.env))
    except ConfigError as exc:
        raise DeployError(f"the deployed config with {dict(counts)} does not validate: {exc}") from exc
    texts = ConfigTexts(json.dumps(user, indent=2) + "\n", baseline.env)
    return _scale(client, Job(build_plan(topology, target="kubernetes"), topology, texts), baseline)


def _scale(client: KubeClient, job: Job, baseline: ConfigTexts) -> Applied | Unchanged:
    try:
        old_topology = load_documents(json.loads(baseline.user), json.loads(baseline.env))
    except ConfigError as exc:
        raise DeployError(f"the deployed config no longer validates, redeploy instead: {exc}") from exc
    old = {c.name: c for c in build_plan(old_topology, target="kubernetes").node_managers}
    new = {c.name: c for c in job.plan.node_managers}
    removed = sorted(old.keys() - new.keys(), key=lambda name: (-(old[name].index or 0), name))
    added = [name for name in new if name not in old]
    if not removed and not added:
        return Unchanged(job.namespace, scale=True)
    job = _with_token(client, job)

    if job.plan.deploy_mode == "single_container":
        result = apply_objects(client, job.objects(), job.namespace)
        return Applied("re-applied the single container with " + _counts(job.plan), result)

    result = ApplyResult()
    for name in removed:
        try:
            client.delete("Deployment", job.namespace, name)
            result.applied.append(f"deleted Deployment/{name}")
        except KubeError as exc:
            result.failures.append(exc)
    objects = job.objects()
    # the ConfigMap, and the instance credentials the new node managers need
    shared_names = {("ConfigMap", CONFIG_MAP), ("Secret", INSTANCE_CREDENTIALS_SECRET)}
    shared = [obj for obj in objects if (obj["kind"], obj["metadata"]["name"]) in shared_names]
    config_result = apply_objects(client, shared, job.namespace)
    added_objects = [obj for obj in objects if obj["metadata"]["labels"].get(NAME_LABEL) in added]
    added_result = apply_objects(client, added_objects, job.namespace) if added_objects else ApplyResult()
    for part in (config_result, added_result):
        result.applied += part.applied
        result.failures += part.failures
        result.method = result.method or part.method
    summary = f"scaled job {job.plan.job_id} to {_counts(job.plan)}"
    if removed:
        summary += "; removed " + ", ".join(removed)
    if added:
        summary += "; added " + ", ".join(added)
    return Applied(summary, result)


def delete(client: KubeClient, namespace: str, job_id: str, *, delete_namespace: bool = False) -> Deleted:
    """Delete every object carrying the job's labels; the namespace too when asked and motor created it."""
    labels = owner_labels(job_id)
    deleted: list[str] = []
    failures: list[KubeError] = []
    kept_namespace = False
    for kind in DELETE_ORDER:
        try:
            found = client.find(kind, namespace, labels)
        except KubeError as exc:
            if not (kind in OPTIONAL_KINDS and exc.status == 404):  # the cluster lacks the operator's CRDs
                failures.append(exc)
            continue
        for obj in found:
            name = obj["metadata"]["name"]
            try:
                if client.delete(kind, namespace, name):
                    deleted.append(f"{kind}/{name}")
            except KubeError as exc:
                failures.append(exc)
    if delete_namespace:
        try:
            found_namespace = client.get("Namespace", None, namespace)
            namespace_labels = ((found_namespace or {}).get("metadata") or {}).get("labels") or {}
            if found_namespace is not None and namespace_labels.get(MANAGED_BY) == "motor":
                client.delete("Namespace", None, namespace)
                deleted.append(f"Namespace/{namespace}")
            elif found_namespace is not None:
                kept_namespace = True
        except KubeError as exc:
            failures.append(exc)
    return Deleted(job_id, namespace, deleted, failures, kept_namespace)


def status(client: KubeClient, namespace: str, job_id: str) -> Status:
    try:
        deployments = client.find("Deployment", namespace, owner_labels(job_id))
    except KubeError as exc:
        raise DeployError(f"failed {exc}") from exc
    rows = []
    for obj in sorted(deployments, key=lambda d: d["metadata"]["name"]):
        labels = obj["metadata"].get("labels") or {}
        spec: dict[str, Any] = obj.get("spec") or {}
        observed: dict[str, Any] = obj.get("status") or {}
        containers = (((spec.get("template") or {}).get("spec") or {}).get("containers")) or [{}]
        rows.append(
            DeploymentRow(
                obj["metadata"]["name"],
                labels.get("motor.io/component", "-"),
                labels.get("motor.io/role", "-"),
                f"{observed.get('readyReplicas', 0)}/{spec.get('replicas', 0)}",
                str(containers[0].get("image", "-")),
            )
        )
    return Status(job_id, namespace, rows)


# ---- helpers ----------------------------------------------------------------------------------------------


def _config_map(job: Job) -> Manifest:
    return next(obj for obj in job.objects() if obj["kind"] == "ConfigMap")


def _baseline(client: KubeClient, namespace: str, option: str) -> ConfigTexts:
    try:
        config_map = client.get("ConfigMap", namespace, CONFIG_MAP)
    except KubeError as exc:
        raise DeployError(f"failed {exc}") from exc
    data = (config_map or {}).get("data") or {}
    if "user_config.json" not in data or "env.json" not in data:
        raise DeployError(
            f"{option} needs the deployed baseline, but ConfigMap/{CONFIG_MAP} with user_config.json and "
            f"env.json is not in namespace {namespace}; deploy once without {option} first"
        )
    for key in ("user_config.json", "env.json"):
        try:
            json.loads(data[key])
        except json.JSONDecodeError as exc:
            raise DeployError(
                f"the deployed baseline ConfigMap/{CONFIG_MAP} {key} is not valid JSON ({exc.msg}); "
                "redeploy without " + option
            ) from exc
    return ConfigTexts(user=data["user_config.json"], env=data["env.json"])


def _refused(texts: ConfigTexts, baseline: ConfigTexts, whitelist: WhitelistTree) -> list[str]:
    """The changed paths the whitelist refuses (the baseline carries markers for credentials, so the new
    texts are compared with theirs too: see `_changed_credentials`)."""
    user, env = json.loads(redact_user_config(texts.user)), json.loads(redact_env_config(texts.env))
    refused = refused_changes(user, json.loads(baseline.user), whitelist)
    refused += [f"env.json:{path}" for path in changed_paths(env, json.loads(baseline.env))]
    return refused


def _changed_credentials(client: KubeClient, job: Job) -> list[str]:
    """The credentials (API keys, env.json secrets) that differ from the deployed Secret: only a redeploy
    applies them."""
    wanted = job.plan.secrets.get(CREDENTIALS_SECRET, {})
    try:
        deployed = secret_data(client.get("Secret", job.namespace, CREDENTIALS_SECRET))
    except KubeError as exc:
        return [f"Secret/{CREDENTIALS_SECRET} (cannot be compared: {exc.reason})"]
    return [
        f"Secret/{CREDENTIALS_SECRET}:{key} (api_key_config.valid_keys or an env.json credential)"
        for key in sorted(wanted.keys() | deployed.keys())
        if wanted.get(key) != deployed.get(key)
    ]


def _counts(plan: Plan) -> str:
    per_role: dict[str, int] = {}
    for component in plan.node_managers:
        per_role[str(component.role)] = per_role.get(str(component.role), 0) + 1
    return ", ".join(f"{count} {role}" for role, count in per_role.items())
