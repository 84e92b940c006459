"""Kubernetes operations on a job: deploy, update the config in place, scale instances, status, delete.

Each returns an exit code and prints what it did; every failed object is printed as `Kind/name: reason`.
The deployed ConfigMap (`motor-config`) holds the config pair as written and is the baseline that
`--update-config` and `--update-instance-num` compare against.
"""

import hashlib
import json
import secrets
import sys
from dataclasses import dataclass, replace
from typing import Any

from motor.config import ConfigError, load_documents
from motor.config.topology import Topology
from motor.config.whitelist import (
    INSTANCE_COUNT_KEYS,
    SCALE_WHITELIST,
    UPDATE_WHITELIST,
    WhitelistTree,
    changed_paths,
    refused_changes,
)
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

EXIT_OK = 0
EXIT_FAILED = 1


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


def deploy(client: KubeClient, job: Job) -> int:
    try:
        job = with_cluster_token(client, job)
    except KubeError as exc:
        print(f"motor: failed {exc}", file=sys.stderr)
        return EXIT_FAILED
    result = apply_objects(client, job.objects(), job.namespace)
    return _report(result, f"deployed job {job.plan.job_id} to namespace {job.namespace}")


def with_cluster_token(client: KubeClient, job: Job) -> Job:
    """The job with the controller token its namespace already holds (the generated token Secret is never
    overwritten, so the node managers' instance credentials must derive from it), else a fresh one."""
    deployed = secret_data(client.get("Secret", job.namespace, TOKEN_SECRET)).get(TOKEN_KEY)
    return replace(job, token=deployed or job.token or secrets.token_urlsafe(32))


def update_config(client: KubeClient, job: Job) -> int:
    """Re-apply only the ConfigMap, and only when every change is whitelisted."""
    baseline = _baseline(client, job.namespace, "--update-config")
    if baseline is None:
        return EXIT_FAILED
    refused = _refused(job.texts, baseline, UPDATE_WHITELIST) + _changed_credentials(client, job)
    if refused:
        print(
            "motor: refused: --update-config only changes settings that need no redeploy "
            "(log_level, coordinator exception_config and timeout_config); these changes need a redeploy:",
            file=sys.stderr,
        )
        for path in refused:
            print(f"  {path}", file=sys.stderr)
        if any(path.rsplit(".", 1)[-1] in INSTANCE_COUNT_KEYS for path in refused):
            print("motor: change instance counts with --update-instance-num", file=sys.stderr)
        return EXIT_FAILED
    changed = changed_paths(json.loads(redact_user_config(job.texts.user)), json.loads(baseline.user))
    if not changed:
        print(f"nothing to update: the config equals the one deployed in namespace {job.namespace}")
        return EXIT_OK
    result = apply_objects(client, [_config_map(job)], job.namespace)
    code = _report(result, "updated ConfigMap/" + CONFIG_MAP + " (" + ", ".join(changed) + ")")
    if code != EXIT_OK:
        return code
    return _roll_readers(client, job, changed)


# Components read user_config.json at start: after an update the Deployments whose section changed are rolled.
# Engine hosts are left alone (a node manager's log level waits for their next restart): rolling them restarts
# the engines.
ROLLED_SECTIONS = {"motor_controller_config": CONTROLLER, "motor_coordinator_config": COORDINATOR}
REVISION_ANNOTATION = "motor.io/config-revision"


def _roll_readers(client: KubeClient, job: Job, changed: list[str]) -> int:
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
    if job.plan.deploy_mode != "multi_deployment":
        print(f"restart the {job.plan.job_id} pod to apply the change: every component runs in it")
        return EXIT_OK
    revision = hashlib.sha256((job.texts.user + job.texts.env).encode()).hexdigest()[:16]
    failed = 0
    for name in names:
        patch = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": job.namespace},
            "spec": {"template": {"metadata": {"annotations": {REVISION_ANNOTATION: revision}}}},
        }
        try:
            client.merge_patch(patch)
            print(f"  rolled Deployment/{name} to config revision {revision}")
        except KubeError as exc:
            print(f"motor: failed {exc}", file=sys.stderr)
            failed += 1
    if waiting:
        print("takes effect when the engine pods next restart: " + ", ".join(waiting))
    return EXIT_FAILED if failed else EXIT_OK


def scale(client: KubeClient, job: Job) -> int:
    """Delete the instances the new counts drop (highest index first), then add only the new ones."""
    baseline = _baseline(client, job.namespace, "--update-instance-num")
    if baseline is None:
        return EXIT_FAILED
    refused = _refused(job.texts, baseline, SCALE_WHITELIST) + _changed_credentials(client, job)
    if refused:
        print(
            "motor: refused: --update-instance-num only changes "
            + ", ".join(sorted(INSTANCE_COUNT_KEYS))
            + "; these differ from the deployed config too:",
            file=sys.stderr,
        )
        for path in refused:
            print(f"  {path}", file=sys.stderr)
        return EXIT_FAILED
    try:
        old_topology = load_documents(json.loads(baseline.user), json.loads(baseline.env))
    except ConfigError as exc:
        print(f"motor: the deployed config no longer validates, redeploy instead: {exc}", file=sys.stderr)
        return EXIT_FAILED
    old = {c.name: c for c in build_plan(old_topology, target="kubernetes").node_managers}
    new = {c.name: c for c in job.plan.node_managers}
    removed = sorted(old.keys() - new.keys(), key=lambda name: (-(old[name].index or 0), name))
    added = [name for name in new if name not in old]
    if not removed and not added:
        print("nothing to scale: the instance counts equal the deployed ones")
        return EXIT_OK
    try:
        job = with_cluster_token(client, job)
    except KubeError as exc:
        print(f"motor: failed {exc}", file=sys.stderr)
        return EXIT_FAILED

    if job.plan.deploy_mode == "single_container":
        result = apply_objects(client, job.objects(), job.namespace)
        return _report(result, "re-applied the single container with " + _counts(job.plan))

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
    return _report(result, summary)


def delete(client: KubeClient, namespace: str, job_id: str, *, delete_namespace: bool = False) -> int:
    """Delete every object carrying the job's labels; the namespace too when asked and motor created it."""
    labels = owner_labels(job_id)
    deleted: list[str] = []
    failures: list[KubeError] = []
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
                print(f"kept Namespace/{namespace}: motor did not create it")
        except KubeError as exc:
            failures.append(exc)
    for exc in failures:
        print(f"motor: failed {exc}", file=sys.stderr)
    if not deleted and not failures:
        print(f"nothing to delete: no objects of job {job_id} in namespace {namespace}")
    else:
        print(f"deleted {len(deleted)} object(s) of job {job_id} from namespace {namespace}")
        for name in deleted:
            print(f"  {name}")
    return EXIT_FAILED if failures else EXIT_OK


def status(client: KubeClient, namespace: str, job_id: str) -> int:
    try:
        deployments = client.find("Deployment", namespace, owner_labels(job_id))
    except KubeError as exc:
        print(f"motor: failed {exc}", file=sys.stderr)
        return EXIT_FAILED
    if not deployments:
        print(f"no deployment of job {job_id} in namespace {namespace}")
        return EXIT_FAILED
    rows = [("NAME", "COMPONENT", "ROLE", "READY", "IMAGE")]
    for obj in sorted(deployments, key=lambda d: d["metadata"]["name"]):
        labels = obj["metadata"].get("labels") or {}
        spec: dict[str, Any] = obj.get("spec") or {}
        observed: dict[str, Any] = obj.get("status") or {}
        containers = (((spec.get("template") or {}).get("spec") or {}).get("containers")) or [{}]
        rows.append(
            (
                obj["metadata"]["name"],
                labels.get("motor.io/component", "-"),
                labels.get("motor.io/role", "-"),
                f"{observed.get('readyReplicas', 0)}/{spec.get('replicas', 0)}",
                str(containers[0].get("image", "-")),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    print(f"job {job_id} in namespace {namespace}:")
    for row in rows:
        print("  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    return EXIT_OK


# ---- helpers ----------------------------------------------------------------------------------------------


def _config_map(job: Job) -> Manifest:
    return next(obj for obj in job.objects() if obj["kind"] == "ConfigMap")


def _baseline(client: KubeClient, namespace: str, option: str) -> ConfigTexts | None:
    try:
        config_map = client.get("ConfigMap", namespace, CONFIG_MAP)
    except KubeError as exc:
        print(f"motor: failed {exc}", file=sys.stderr)
        return None
    data = (config_map or {}).get("data") or {}
    if "user_config.json" not in data or "env.json" not in data:
        print(
            f"motor: {option} needs the deployed baseline, but ConfigMap/{CONFIG_MAP} with user_config.json and "
            f"env.json is not in namespace {namespace}; deploy once without {option} first",
            file=sys.stderr,
        )
        return None
    for key in ("user_config.json", "env.json"):
        try:
            json.loads(data[key])
        except json.JSONDecodeError as exc:
            print(
                f"motor: the deployed baseline ConfigMap/{CONFIG_MAP} {key} is not valid JSON ({exc.msg}); "
                "redeploy without " + option,
                file=sys.stderr,
            )
            return None
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


def _report(result: ApplyResult, summary: str) -> int:
    for exc in result.failures:
        print(f"motor: failed {exc}", file=sys.stderr)
    via = f" via {result.method}" if result.method else ""
    if result.failures:
        print(
            f"motor: {len(result.failures)} object(s) failed, {len(result.applied)} applied{via}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    print(f"{summary}: {len(result.applied)} object(s){via}")
    for name in result.applied:
        print(f"  {name}")
    return EXIT_OK
