"""A thin, kind-agnostic REST layer over the official `kubernetes` client (its transport, auth and kubeconfig).

Only the kinds motor creates are known (`RESOURCES`). Every call has a timeout. Failures raise `KubeError`
naming the object (kind/name) and the API server's reason; an unreachable server raises `KubeUnavailable`.
"""

import json
from dataclasses import dataclass
from typing import Any

import kubernetes
import urllib3
from kubernetes.client.exceptions import ApiException

Manifest = dict[str, Any]

FIELD_MANAGER = "motor"
JSON = "application/json"
APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
DEFAULT_TIMEOUT_S = 30.0
SSA_PROBE_NAME = "motor-server-side-apply-probe"


@dataclass(frozen=True)
class ResourceType:
    api_version: str
    kind: str
    plural: str
    namespaced: bool = True

    def collection_path(self, namespace: str | None) -> str:
        base = f"/api/{self.api_version}" if "/" not in self.api_version else f"/apis/{self.api_version}"
        if self.namespaced:
            if namespace is None:
                raise ValueError(f"{self.kind} is namespaced: give a namespace")
            return f"{base}/namespaces/{namespace}/{self.plural}"
        return f"{base}/{self.plural}"

    def object_path(self, namespace: str | None, name: str) -> str:
        return f"{self.collection_path(namespace)}/{name}"


RESOURCES = {
    resource.kind: resource
    for resource in (
        ResourceType("v1", "Namespace", "namespaces", namespaced=False),
        ResourceType("v1", "ConfigMap", "configmaps"),
        ResourceType("v1", "Secret", "secrets"),
        ResourceType("v1", "Service", "services"),
        ResourceType("apps/v1", "Deployment", "deployments"),
        ResourceType("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies"),
        ResourceType("v1", "ServiceAccount", "serviceaccounts"),
        ResourceType("rbac.authorization.k8s.io/v1", "Role", "roles"),
        ResourceType("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings"),
        ResourceType("monitoring.coreos.com/v1", "PodMonitor", "podmonitors"),
        ResourceType("monitoring.coreos.com/v1", "PrometheusRule", "prometheusrules"),
    )
}
# Kinds of the prometheus-operator's CRDs: a cluster without them answers 404 for the whole kind.
OPTIONAL_KINDS = ("PodMonitor", "PrometheusRule")
# Reverse dependency order: monitoring and workloads first, the config they mount last.
DELETE_ORDER = (
    *OPTIONAL_KINDS,
    "Deployment",
    "Service",
    "NetworkPolicy",
    "RoleBinding",
    "Role",
    "ServiceAccount",
    "Secret",
    "ConfigMap",
)


class KubeError(Exception):
    def __init__(self, kind: str, name: str, status: int | None, reason: str) -> None:
        super().__init__(f"{kind}/{name}: {reason}")
        self.kind = kind
        self.name = name
        self.status = status
        self.reason = reason


class KubeUnavailable(Exception):
    """The API server cannot be reached at all."""


def describe(obj: Manifest) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


class KubeClient:
    def __init__(self, api_client: kubernetes.client.ApiClient, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self.api = api_client
        self.timeout = timeout

    @classmethod
    def from_kubeconfig(cls, path: str | None = None, context: str | None = None) -> "KubeClient":
        """From `path`, else in-cluster when running in a pod, else $KUBECONFIG / ~/.kube/config."""
        if path is None:
            try:
                kubernetes.config.load_incluster_config()
                return cls(kubernetes.client.ApiClient())
            except kubernetes.config.ConfigException:
                pass
        return cls(kubernetes.config.new_client_from_config(config_file=path, context=context))

    @property
    def host(self) -> str:
        return str(self.api.configuration.host)

    # ---- object operations ----------------------------------------------------------------------------------

    def get(self, kind: str, namespace: str | None, name: str) -> Manifest | None:
        status, body = self._call(
            kind, name, "GET", RESOURCES[kind].object_path(namespace, name), ok_missing=True
        )
        return None if status == 404 else body

    def find(self, kind: str, namespace: str | None, labels: dict[str, str]) -> list[Manifest]:
        """Objects of `kind` carrying all `labels` (filtered here too, for servers that ignore labelSelector)."""
        selector = ",".join(f"{key}={value}" for key, value in labels.items())
        path = RESOURCES[kind].collection_path(namespace)
        _, body = self._call(kind, "*", "GET", path, query=[("labelSelector", selector)])
        items = (body or {}).get("items") or []
        return [
            item
            for item in items
            if all(((item.get("metadata") or {}).get("labels") or {}).get(k) == v for k, v in labels.items())
        ]

    def create(self, obj: Manifest) -> Manifest | None:
        kind, name = describe(obj)
        path = RESOURCES[kind].collection_path(obj["metadata"].get("namespace"))
        return self._call(kind, name, "POST", path, body=obj, query=[("fieldManager", FIELD_MANAGER)])[1]

    def merge_patch(self, obj: Manifest) -> Manifest | None:
        kind, name = describe(obj)
        path = RESOURCES[kind].object_path(obj["metadata"].get("namespace"), name)
        query = [("fieldManager", FIELD_MANAGER)]
        return self._call(kind, name, "PATCH", path, body=obj, query=query, content_type=MERGE_PATCH)[1]

    def server_side_apply(self, obj: Manifest, *, dry_run: bool = False) -> Manifest | None:
        kind, name = describe(obj)
        path = RESOURCES[kind].object_path(obj["metadata"].get("namespace"), name)
        query = [("fieldManager", FIELD_MANAGER), ("force", "true")]
        if dry_run:
            query.append(("dryRun", "All"))
        return self._call(kind, name, "PATCH", path, body=obj, query=query, content_type=APPLY_PATCH)[1]

    def delete(self, kind: str, namespace: str | None, name: str) -> bool:
        """Delete one object (dependents in the background); False when it was already gone."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        path = RESOURCES[kind].object_path(namespace, name)
        status, _ = self._call(kind, name, "DELETE", path, body=body, ok_missing=True)
        return status != 404

    def supports_server_side_apply(self, namespace: str) -> bool:
        """A server-side-apply dry run of a throwaway ConfigMap: a real API server answers 2xx (SSA creates
        what is missing); a server without SSA (e.g. the kmock emulator) answers 404/405/415/400."""
        probe = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": SSA_PROBE_NAME, "namespace": namespace},
            "data": {},
        }
        try:
            self.server_side_apply(probe, dry_run=True)
        except KubeError as exc:
            if exc.status == 404 and f'namespaces "{namespace}" not found' in exc.reason:
                raise KubeError(
                    "Namespace", namespace, 404, "does not exist: create it or deploy with --create-namespace"
                ) from exc
            if exc.status in (400, 404, 405, 415):
                return False
            raise
        return True

    # ---- transport ------------------------------------------------------------------------------------------

    def _call(
        self,
        kind: str,
        name: str,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = JSON,
        ok_missing: bool = False,
    ) -> tuple[int, Manifest | None]:
        request = self.api.param_serialize(
            method,
            path,
            query_params=query or [],
            header_params={"Content-Type": content_type, "Accept": JSON},
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            response = self.api.call_api(*request, _request_timeout=self.timeout)
            raw = response.read()
        except ApiException as exc:
            raise KubeError(kind, name, exc.status, _reason(exc.status, exc.body)) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise KubeUnavailable(f"cannot reach the Kubernetes API at {self.host}: {exc}") from exc
        status = response.status
        if ok_missing and status == 404:
            return status, None
        if not 200 <= status < 300:
            raise KubeError(kind, name, status, _reason(status, raw))
        return status, json.loads(raw) if raw else None


def _reason(status: int | None, raw: bytes | str | None) -> str:
    """The API server's Status message (first line), else the body's start."""
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else (raw or "")
    try:
        document = json.loads(text)
    except json.JSONDecodeError:
        document = None
    if isinstance(document, dict) and document.get("message"):
        message = str(document["message"]).splitlines()[0]
        reason = document.get("reason")
        return f"HTTP {status} {reason}: {message}" if reason else f"HTTP {status}: {message}"
    return f"HTTP {status}: {text[:200].strip() or 'no response body'}"
