"""Apply objects: server-side apply when the API server supports it, else create-or-update.

Support is detected once per run with a server-side-apply dry run (see `KubeClient.supports_server_side_apply`).
The fallback creates each object and, when it already exists (409), updates it with a JSON merge patch of the
whole object: the kmock emulator used in tests implements neither server-side apply nor PUT, only PATCH.
Namespaces and the Secrets motor generates (the controller token) are only created when absent, never updated;
the Secrets built from the config are applied like everything else. Every failure is collected with its object
and reason.
"""

from dataclasses import dataclass, field

from motor.deploy.k8s.client import KubeClient, KubeError, Manifest, describe
from motor.deploy.k8s.secrets import GENERATED_ANNOTATION

SERVER_SIDE_APPLY = "server-side apply"
CREATE_OR_UPDATE = "create-or-update"


@dataclass
class ApplyResult:
    applied: list[str] = field(default_factory=list)
    failures: list[KubeError] = field(default_factory=list)
    method: str = ""

    @property
    def ok(self) -> bool:
        return not self.failures


def apply_objects(client: KubeClient, objects: list[Manifest], namespace: str) -> ApplyResult:
    result = ApplyResult()
    for obj in (o for o in objects if o["kind"] == "Namespace"):
        try:
            create_if_absent(client, obj)
            result.applied.append("Namespace/{1}".format(*describe(obj)))
        except KubeError as exc:
            result.failures.append(exc)
    rest = [o for o in objects if o["kind"] != "Namespace"]
    if not rest:
        return result
    try:
        server_side = client.supports_server_side_apply(namespace)
    except KubeError as exc:
        result.failures.append(exc)
        server_side = False
    result.method = SERVER_SIDE_APPLY if server_side else CREATE_OR_UPDATE
    for obj in rest:
        try:
            if generated(obj):
                create_if_absent(client, obj)
            elif server_side:
                client.server_side_apply(obj)
            else:
                create_or_update(client, obj)
            result.applied.append("{}/{}".format(*describe(obj)))
        except KubeError as exc:
            result.failures.append(exc)
    return result


def generated(obj: Manifest) -> bool:
    return (obj["metadata"].get("annotations") or {}).get(GENERATED_ANNOTATION) == "true"


def create_or_update(client: KubeClient, obj: Manifest) -> None:
    try:
        client.create(obj)
    except KubeError as exc:
        if exc.status != 409:
            raise
        client.merge_patch(obj)


def create_if_absent(client: KubeClient, obj: Manifest) -> None:
    try:
        client.create(obj)
    except KubeError as exc:
        if exc.status != 409:
            raise
