"""Credentials on Kubernetes: the Secrets motor creates, the TLS files it mounts from Secrets, and what never
leaves them.

- `motor-controller-token` (key `token`): generated once and never overwritten (running pods keep agreeing),
  unless env.json sets MOTOR_CONTROLLER_TOKEN.
- `motor-credentials`: what the config itself holds, keyed by variable name: the API keys
  (`api_key_config.valid_keys`, one per line, as MOTOR_API_KEYS), the controller token and etcd credentials
  when env.json sets them, and every env.json value whose name says it is a credential (`plan.is_secret_name`).
  Re-applied on every deploy: the config is its source.
- TLS files: the operator creates `motor-infer-tls`, `motor-mgmt-tls` and `motor-etcd-tls`, each holding the
  files the channel's config names under their file names (`kubectl create secret generic motor-mgmt-tls
  --from-file=/path/ca.crt --from-file=...`); a pod mounts, read-only, exactly the files its component names,
  at the directories the config names.

The ConfigMap's copy of user_config.json and env.json (the update baseline) carries a marker instead of each
credential, and `motor deploy --dry-run` writes Secret values as markers unless asked to include them.
"""

import base64
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from motor.deploy.plan import CREDENTIALS_SECRET, is_secret_name
from motor.protocol import env as env_names
from motor.protocol.specs import ControllerSpec, CoordinatorSpec, NodeManagerSpec, Spec, TlsFiles

Manifest = dict[str, Any]

GENERATED_ANNOTATION = "motor.io/generated"  # a Secret motor generated: created once, never overwritten
TLS_SECRETS = {"infer": "motor-infer-tls", "mgmt": "motor-mgmt-tls", "etcd": "motor-etcd-tls"}
TLS_FILE_MODE = 0o440  # readable by the owner and the pod's fsGroup


def redacted(where: str) -> str:
    return f"<redacted: in Secret {where}>"


# ---- the config texts kept in the ConfigMap -------------------------------------------------------------


def redact_user_config(text: str) -> str:
    document = json.loads(text)
    keys = ((document.get("motor_coordinator_config") or {}).get("api_key_config") or {}).get("valid_keys")
    if not isinstance(keys, list) or not keys:
        return text
    marker = redacted(f"{CREDENTIALS_SECRET}, key {env_names.API_KEYS}")
    document["motor_coordinator_config"]["api_key_config"]["valid_keys"] = [marker for _ in keys]
    return json.dumps(document, indent=2) + "\n"


def redact_env_config(text: str) -> str:
    document = json.loads(text)
    changed = False
    for section in document.values():
        if not isinstance(section, dict):
            continue
        for name in section:
            if is_secret_name(name):
                section[name] = redacted(CREDENTIALS_SECRET)
                changed = True
    return json.dumps(document, indent=2) + "\n" if changed else text


# ---- Secret objects -------------------------------------------------------------------------------------


def redact_objects(objects: Iterable[Manifest]) -> list[Manifest]:
    """The objects with every Secret value replaced by a marker (what a dry run shows by default)."""
    shown = []
    for obj in objects:
        if obj["kind"] == "Secret":
            name = obj["metadata"]["name"]
            obj = {
                **obj,
                "stringData": {key: redacted(f"{name}, key {key}") for key in obj.get("stringData", {})},
            }
        shown.append(obj)
    return shown


def secret_data(obj: Manifest | None) -> dict[str, str]:
    """A stored Secret's values, whether the API server returned them as `data` (base64) or `stringData`."""
    if obj is None:
        return {}
    values = {key: base64.b64decode(value).decode() for key, value in (obj.get("data") or {}).items()}
    values.update(obj.get("stringData") or {})
    return values


# ---- TLS files mounted from Secrets ---------------------------------------------------------------------


def tls_of(spec: Spec | None) -> list[tuple[str, TlsFiles]]:
    """(channel, files) of every TLS setting a component's spec uses."""
    found: list[tuple[str, TlsFiles | None]] = []
    if isinstance(spec, ControllerSpec):
        found += [("mgmt", spec.mgmt_tls), ("etcd", spec.etcd.tls if spec.etcd else None)]
    elif isinstance(spec, CoordinatorSpec):
        found += [("infer", spec.infer_tls), ("mgmt", spec.mgmt_tls)]
    elif isinstance(spec, NodeManagerSpec):
        found += [("mgmt", spec.mgmt_tls)]
    return [(channel, files) for channel, files in found if files is not None]


@dataclass(frozen=True)
class TlsMount:
    secret: str
    directory: str
    files: tuple[str, ...]  # file names = keys of the Secret

    @property
    def volume_name(self) -> str:
        return f"{self.secret}-{hashlib.sha256(self.directory.encode()).hexdigest()[:8]}"


def tls_mounts(specs: Iterable[Spec | None]) -> list[TlsMount]:
    """One read-only Secret volume per (Secret, directory) the specs' TLS files live in."""
    files_by_mount: dict[tuple[str, str], set[str]] = {}
    for spec in specs:
        for channel, files in tls_of(spec):
            for path in files.model_dump(exclude_none=True).values():
                where = PurePosixPath(path)
                files_by_mount.setdefault((TLS_SECRETS[channel], str(where.parent)), set()).add(where.name)
    _check_unambiguous(files_by_mount)
    return [
        TlsMount(secret, directory, tuple(sorted(names)))
        for (secret, directory), names in sorted(files_by_mount.items())
    ]


def _check_unambiguous(files_by_mount: dict[tuple[str, str], set[str]]) -> None:
    owners: dict[str, str] = {}
    for secret, directory in files_by_mount:
        if owners.setdefault(directory, secret) != secret:
            raise ValueError(
                f"{directory}: TLS files of two channels ({owners[directory]}, {secret}) are kept in the same "
                "directory; on Kubernetes each channel's files come from its own Secret mounted at their "
                "directory, so put each channel's files (tls_config.*_tls_config) in a directory of its own"
            )
    seen: dict[tuple[str, str], str] = {}
    for (secret, directory), names in files_by_mount.items():
        for name in names:
            other = seen.setdefault((secret, name), directory)
            if other != directory:
                raise ValueError(
                    f"{other}/{name} and {directory}/{name}: the Secret {secret} holds one file per name; "
                    "give the TLS files of one channel distinct names"
                )


def tls_volume(mount: TlsMount) -> Manifest:
    return {
        "name": mount.volume_name,
        "secret": {
            "secretName": mount.secret,
            "items": [{"key": name, "path": name} for name in mount.files],
            "defaultMode": TLS_FILE_MODE,
        },
    }


def tls_volume_mount(mount: TlsMount) -> Manifest:
    return {"name": mount.volume_name, "mountPath": mount.directory, "readOnly": True}
