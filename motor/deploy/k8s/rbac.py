"""The planner's rights, the only Kubernetes API rights a motor pod gets: a ServiceAccount bound to a Role in the
job's namespace that reads and applies what `--update-instance-num` does (the ConfigMap baseline, the instance
credentials, the engine Deployments) and nothing else. Every other pod runs without a service-account token."""

from motor.deploy.k8s.context import Manifest, ManifestContext

PLANNER_ACCOUNT = "motor-planner"
RBAC_GROUP = "rbac.authorization.k8s.io"

# What the planner's scale path calls: read the baseline and the token, apply the ConfigMap and the instance
# credentials (create, or patch when present; server-side apply is a patch), create and delete the instances'
# Deployments, find them by label.
PLANNER_RULES: list[Manifest] = [
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "patch"]},
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "create", "patch"]},
    {
        "apiGroups": ["apps"],
        "resources": ["deployments"],
        "verbs": ["get", "list", "create", "patch", "delete"],
    },
]


def planner_rbac(context: ManifestContext) -> list[Manifest]:
    labels = {"app.kubernetes.io/name": PLANNER_ACCOUNT}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": context.metadata(PLANNER_ACCOUNT, labels)},
        {
            "apiVersion": f"{RBAC_GROUP}/v1",
            "kind": "Role",
            "metadata": context.metadata(PLANNER_ACCOUNT, labels),
            "rules": PLANNER_RULES,
        },
        {
            "apiVersion": f"{RBAC_GROUP}/v1",
            "kind": "RoleBinding",
            "metadata": context.metadata(PLANNER_ACCOUNT, labels),
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": PLANNER_ACCOUNT},
            "subjects": [{"kind": "ServiceAccount", "name": PLANNER_ACCOUNT, "namespace": context.namespace}],
        },
    ]
