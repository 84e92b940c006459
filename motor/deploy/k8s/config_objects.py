"""The objects a job's pods read their configuration from: its Namespace, the ConfigMap `motor-config`
(user_config.json and env.json with their credentials replaced by markers, and every component's spec) and the
Secrets (the generated controller token, the config's credentials, the node managers' instance credentials)."""

import json

from motor.deploy.k8s.context import Manifest, ManifestContext
from motor.deploy.k8s.labels import CONFIG_MAP, owner_labels
from motor.deploy.k8s.secrets import GENERATED_ANNOTATION, redact_env_config, redact_user_config
from motor.deploy.plan import (
    CONTROLLER,
    CREDENTIALS_SECRET,
    INSTANCE_CREDENTIALS_SECRET,
    TOKEN_KEY,
    TOKEN_SECRET,
)
from motor.protocol import env as env_names
from motor.protocol.credentials import instance_credential


def namespace(context: ManifestContext) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": context.namespace, "labels": owner_labels(context.plan.job_id)},
    }


def config_map(context: ManifestContext) -> Manifest:
    user_text = context.texts.user
    if context.plan.deploy_mode == "local":
        user_text = _with_deploy_mode(user_text, "multi_deployment")
    data = {
        "user_config.json": redact_user_config(user_text),
        "env.json": redact_env_config(context.texts.env),
        **context.plan.files,
    }
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": context.metadata(CONFIG_MAP), "data": data}


def secret_objects(context: ManifestContext, token: str) -> list[Manifest]:
    """The generated token Secret when a component needs it, the Secrets built from the config, and the
    node managers' instance credentials derived from the controller's token (env.json's, else `token`)."""
    plan = context.plan
    objects = []
    if any(item.secret == TOKEN_SECRET for c in plan.components for item in c.secret_env):
        token_secret = secret(context, TOKEN_SECRET, {TOKEN_KEY: token})
        token_secret["metadata"]["annotations"] = {GENERATED_ANNOTATION: "true"}
        objects.append(token_secret)
    objects += [secret(context, name, data) for name, data in sorted(plan.secrets.items())]
    instances = [
        item.key
        for component in plan.node_managers
        for item in component.secret_env
        if item.secret == INSTANCE_CREDENTIALS_SECRET
    ]
    if instances:
        token_of_controller = controller_token(context, token)
        credentials = {key: instance_credential(token_of_controller, key) for key in instances}
        objects.append(secret(context, INSTANCE_CREDENTIALS_SECRET, credentials))
    return objects


def controller_token(context: ManifestContext, generated: str) -> str:
    """The token the controller runs with: env.json's (in the credentials Secret) or the generated one."""
    plan = context.plan
    for item in plan.component(CONTROLLER).secret_env:
        if item.env == env_names.CONTROLLER_TOKEN and item.secret == CREDENTIALS_SECRET:
            return plan.secrets[CREDENTIALS_SECRET][item.key]
    return generated


def secret(context: ManifestContext, name: str, data: dict[str, str]) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": context.metadata(name),
        "type": "Opaque",
        "stringData": dict(data),
    }


def _with_deploy_mode(user_text: str, deploy_mode: str) -> str:
    """A local config previewed as Kubernetes objects runs as multi_deployment in the cluster."""
    document = json.loads(user_text)
    document.setdefault("motor_deploy_config", {})["deploy_mode"] = deploy_mode
    return json.dumps(document, indent=2) + "\n"
