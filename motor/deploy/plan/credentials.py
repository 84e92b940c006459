"""Credentials kept out of plain environments, the last step of the plan: each component keeps only the motor
secrets its kind uses, and for Kubernetes every credential value moves into a Secret the component names in
`secret_env`.

The Secrets: the controller token motor generates once, what the config itself holds (API keys, env.json
credentials) keyed by variable name, and the node managers' credentials keyed by instance id.
"""

import dataclasses
from collections.abc import Iterable

from motor.deploy.plan.model import Component, ComponentKind, SecretEnv
from motor.protocol import env as env_names
from motor.protocol.credentials import is_credential_env as is_secret_name
from motor.protocol.credentials import is_motor_credential

TOKEN_SECRET = "motor-controller-token"
TOKEN_KEY = "token"
CREDENTIALS_SECRET = "motor-credentials"
INSTANCE_CREDENTIALS_SECRET = "motor-instance-credentials"
ETCD_AUTH_KEYS = {env_names.ETCD_USERNAME: "username", env_names.ETCD_PASSWORD: "password"}

# Which motor component may hold which of motor's own secrets (least privilege).
_MOTOR_SECRETS_OF: dict[ComponentKind, tuple[str, ...]] = {
    "controller": (env_names.CONTROLLER_TOKEN, *ETCD_AUTH_KEYS),
    "coordinator": (env_names.CONTROLLER_TOKEN, env_names.API_KEYS),
    "planner": (env_names.CONTROLLER_TOKEN,),  # lists the instances and drains them through the controller
    "node_manager": (),  # its own instance's credential only (`instance_credential_env`)
    "kv_pool": (),
}


def split_credentials(
    components: Iterable[Component], *, kubernetes: bool, etcd_auth_secret: str | None
) -> tuple[tuple[Component, ...], dict[str, dict[str, str]]]:
    """The components with their credentials split off, and the Secrets built from the config.

    Components are split in the order given (start order), which numbers the keys of a credential that
    components disagree on: -2, -3... A `secret_env` a compiler set already (an instance's credential) stays
    after the split-off ones. The controller token, unless env.json sets it, comes from the token Secret motor
    generates; etcd credentials come from `etcd_auth_secret` when the config names one.
    """
    store = _CredentialStore()
    split = []
    for component in components:
        env, secret_env = _split(component.kind, component.env, kubernetes, etcd_auth_secret, store)
        split.append(dataclasses.replace(component, env=env, secret_env=secret_env + component.secret_env))
    return tuple(split), store.secrets()


def _split(
    kind: ComponentKind,
    env: dict[str, str],
    kubernetes: bool,
    etcd_auth_secret: str | None,
    store: "_CredentialStore",
) -> tuple[dict[str, str], tuple[SecretEnv, ...]]:
    allowed = _MOTOR_SECRETS_OF[kind]
    env = {name: value for name, value in env.items() if not is_motor_credential(name) or name in allowed}
    if not kubernetes:
        return env, ()
    plain: dict[str, str] = {}
    secret_env: list[SecretEnv] = []
    for name, value in env.items():
        if is_secret_name(name):
            secret_env.append(SecretEnv(name, CREDENTIALS_SECRET, store.key(name, value)))
        else:
            plain[name] = value
    if env_names.CONTROLLER_TOKEN in allowed and env_names.CONTROLLER_TOKEN not in env:
        secret_env.append(SecretEnv(env_names.CONTROLLER_TOKEN, TOKEN_SECRET, TOKEN_KEY))
    if kind == "controller" and etcd_auth_secret:
        secret_env = [item for item in secret_env if item.env not in ETCD_AUTH_KEYS]
        secret_env += [SecretEnv(name, etcd_auth_secret, key) for name, key in ETCD_AUTH_KEYS.items()]
    return plain, tuple(secret_env)


class _CredentialStore:
    """The credentials Secret being filled: variable name (numbered when values differ) -> value."""

    def __init__(self) -> None:
        self._data: dict[str, str] = {}

    def key(self, name: str, value: str) -> str:
        key, suffix = name, 1
        while key in self._data and self._data[key] != value:
            suffix += 1
            key = f"{name}-{suffix}"
        self._data[key] = value
        return key

    def secrets(self) -> dict[str, dict[str, str]]:
        return {CREDENTIALS_SECRET: dict(self._data)} if self._data else {}
