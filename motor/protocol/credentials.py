"""Credentials by role, defined once: the per-instance registration credential, which variables hold motor's
own credentials, which names look like a credential, and command lines with their secret values hidden.

- The controller token (MOTOR_CONTROLLER_TOKEN) is the deployment secret: the controller and the coordinators
  hold it, and whoever deploys the job.
- A node manager holds only the credential of its own instance: HMAC-SHA256 of the instance id keyed with the
  controller token (`instance_credential`). The controller derives it again to check a registration or
  heartbeat for that instance id, and presents it when it calls that node manager. The variable holding it is
  named after the instance (`instance_credential_env`), so that several node managers can share one container.
- Engines hold none of these.
"""

import hashlib
import hmac
import json
import re
from typing import Any

from motor.protocol import env as env_names

INSTANCE_CREDENTIAL_ENV_PREFIX = "MOTOR_INSTANCE_CREDENTIAL_"
_INSTANCE_CREDENTIAL_CONTEXT = b"motor instance credential v1\0"

# motor's own credentials: they never reach an engine, whatever a config says
MOTOR_CREDENTIALS = frozenset(
    {env_names.CONTROLLER_TOKEN, env_names.API_KEYS, env_names.ETCD_USERNAME, env_names.ETCD_PASSWORD}
)

# A variable whose name contains one of these holds a credential (HF_TOKEN, AWS_SECRET_ACCESS_KEY, ...): on
# Kubernetes its value goes into a Secret, and an engine gets it only when env.json names it.
_CREDENTIAL_ENV_NAME = re.compile(r"TOKEN|PASSWORD|PASSWD|SECRET|CREDENTIAL|API_KEY")
# Command-line options are matched by whole words, so that `--max-num-batched-tokens` and `--tokenizer` stay
# readable while `--api-key`, `--hf-token` or `--ssl-keyfile-password` are hidden.
_CREDENTIAL_WORDS = frozenset(
    {"TOKEN", "PASSWORD", "PASSWD", "SECRET", "SECRETS", "CREDENTIAL", "CREDENTIALS"}
)
REDACTED = "<redacted>"


def instance_credential(token: str, instance_id: str) -> str:
    """The credential that lets a node manager register and heartbeat `instance_id`, and nothing else."""
    digest = hmac.new(token.encode(), _INSTANCE_CREDENTIAL_CONTEXT + instance_id.encode(), hashlib.sha256)
    return digest.hexdigest()


def instance_credential_env(instance_id: str) -> str:
    """The variable holding the credential of `instance_id`, e.g. MOTOR_INSTANCE_CREDENTIAL_PREFILL_0."""
    return INSTANCE_CREDENTIAL_ENV_PREFIX + re.sub(r"[^A-Z0-9]", "_", instance_id.upper())


def is_motor_credential(name: str) -> bool:
    return name in MOTOR_CREDENTIALS or name.startswith(INSTANCE_CREDENTIAL_ENV_PREFIX)


def is_credential_env(name: str) -> bool:
    """Whether an environment variable's name says it holds a credential (motor's own included)."""
    return is_motor_credential(name) or bool(_CREDENTIAL_ENV_NAME.search(name.upper()))


def is_credential_option(name: str) -> bool:
    """Whether a command-line option (`--api-key`, `hf_token`, ...) or a JSON key names a credential."""
    normalised = name.lstrip("-").upper().replace("-", "_")
    words = normalised.split("_")
    return bool(_CREDENTIAL_WORDS.intersection(words)) or "API_KEY" in normalised or "APIKEY" in words


def redacted_argv(argv: list[str]) -> list[str]:
    """`argv` with the value of every credential option hidden (`--api-key X`, `--api-key=X`, every value of a
    list option), and credential keys of JSON arguments (`--kv-transfer-config '{...}'`) too."""
    shown: list[str] = []
    hiding = False
    for arg in argv:
        if arg.startswith("--"):
            name, equals, _ = arg.partition("=")
            hiding = is_credential_option(name) and not equals
            shown.append(f"{name}={REDACTED}" if equals and is_credential_option(name) else arg)
        elif hiding:
            shown.append(REDACTED)
        else:
            shown.append(_redacted_json(arg))
    return shown


def _redacted_json(arg: str) -> str:
    if not arg.startswith(("{", "[")):
        return arg
    try:
        document = json.loads(arg)
    except ValueError:
        return arg
    hidden = _hide_credential_keys(document)
    return arg if hidden == document else json.dumps(hidden, separators=(",", ":"))


def _hide_credential_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            key: REDACTED if is_credential_option(str(key)) else _hide_credential_keys(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_hide_credential_keys(item) for item in value]
    return value
