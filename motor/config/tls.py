"""TLS as pyMotor configures it: which setting each channel of each component uses, and its checks.

pyMotor copies `motor_deploy_config.tls_config.<channel>_tls_config` into the component sections when it loads
the config. Here a component section's own setting wins, and the deploy section's applies where the component
gives none:

- `infer`: the coordinator's client-facing API (`motor_coordinator_config.infer_tls_config`);
- `mgmt`: management and internal calls, one setting per component, used both for its server and for its calls
  to the others (`mgmt_tls_config` of the controller, the coordinator, and the node managers: an engine
  section's own `motor_nodemanger_config` first, then the top-level one);
- `etcd`: the controller's etcd client (`motor_controller_config.etcd_tls_config`).

Management TLS is all or nothing: a component that talks plain HTTP cannot reach one that only talks TLS.
"""

from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Literal

from motor.config.errors import ConfigIssue
from motor.config.models import TlsConfig, UserConfig

Channel = Literal["infer", "mgmt", "etcd"]
DEPLOY_TLS = "motor_deploy_config.tls_config"


@dataclass(frozen=True)
class TlsSetting:
    """An enabled TLS setting and the config path it was read from."""

    path: str
    config: TlsConfig

    def file_path(self, name: str) -> str:
        return f"{self.path}.{name}"


@dataclass(frozen=True)
class TlsSettings:
    infer: TlsSetting | None = None
    etcd: TlsSetting | None = None
    mgmt: dict[str, TlsSetting] = field(default_factory=dict)  # component key -> setting, when enabled

    @property
    def mgmt_enabled(self) -> bool:
        return bool(self.mgmt)

    def mgmt_of(self, component: str) -> TlsSetting | None:
        return self.mgmt.get(component)


CONTROLLER = "controller"
COORDINATOR = "coordinator"


def node_manager_key(role: str) -> str:
    return f"node_manager:{role}"


def resolve_tls(
    user: UserConfig, node_managers: dict[str, tuple[str, TlsConfig | None]], issues: list[ConfigIssue]
) -> TlsSettings:
    """The enabled settings per channel and component. `node_managers` maps each role to (its node manager
    section's path, that section's mgmt_tls_config)."""
    deploy = user.motor_deploy_config.tls_config
    controller = user.motor_controller_config
    coordinator = user.motor_coordinator_config

    def pick(own: TlsConfig | None, own_path: str, channel: Channel) -> TlsSetting:
        if own is not None:
            return TlsSetting(own_path, own)
        fallback = getattr(deploy, f"{channel}_tls_config")
        return TlsSetting(f"{DEPLOY_TLS}.{channel}_tls_config", fallback or TlsConfig())

    mgmt = {
        CONTROLLER: pick(controller.mgmt_tls_config, "motor_controller_config.mgmt_tls_config", "mgmt"),
        COORDINATOR: pick(coordinator.mgmt_tls_config, "motor_coordinator_config.mgmt_tls_config", "mgmt"),
    }
    for role, (path, own) in node_managers.items():
        mgmt[node_manager_key(role)] = pick(own, f"{path}.mgmt_tls_config", "mgmt")
    infer = pick(coordinator.infer_tls_config, "motor_coordinator_config.infer_tls_config", "infer")
    etcd = pick(controller.etcd_tls_config, "motor_controller_config.etcd_tls_config", "etcd")

    _check_mgmt_agreement(mgmt, issues)
    for setting in mgmt.values():
        _check(setting, server=True, issues=issues)
    _check(infer, server=True, issues=issues)
    _check(etcd, server=False, issues=issues)
    if etcd.config.enable_tls and etcd.config.crl_file:
        issues.append(
            ConfigIssue(
                etcd.file_path("crl_file"),
                "the etcd client (gRPC) checks no revocation lists; remove crl_file and revoke etcd server "
                "certificates by replacing them",
            )
        )
    return TlsSettings(
        infer=infer if infer.config.enable_tls else None,
        etcd=etcd if etcd.config.enable_tls else None,
        mgmt={key: setting for key, setting in mgmt.items() if setting.config.enable_tls},
    )


def _check_mgmt_agreement(mgmt: dict[str, TlsSetting], issues: list[ConfigIssue]) -> None:
    enabled = {setting.path for setting in mgmt.values() if setting.config.enable_tls}
    if not enabled or len(enabled) == len({s.path for s in mgmt.values()}):
        return
    disabled = {s.path: s for s in mgmt.values() if not s.config.enable_tls}
    for setting in disabled.values():
        issues.append(
            ConfigIssue(
                f"{setting.path}.enable_tls",
                f"management TLS is off here but on in {', '.join(sorted(enabled))}; the components call each "
                "other, so it is all or nothing: enable it everywhere (once, in "
                f"{DEPLOY_TLS}.mgmt_tls_config) or nowhere",
            )
        )


def _check(setting: TlsSetting, *, server: bool, issues: list[ConfigIssue]) -> None:
    config = setting.config
    if not config.enable_tls:
        return
    if server:
        for name in ("cert_file", "key_file"):
            if not getattr(config, name):
                issues.append(
                    ConfigIssue(
                        setting.file_path(name),
                        "required with enable_tls: the server presents this certificate and key",
                    )
                )
    elif bool(config.cert_file) != bool(config.key_file):
        missing = "key_file" if config.cert_file else "cert_file"
        issues.append(
            ConfigIssue(setting.file_path(missing), "a client certificate needs both cert_file and key_file")
        )
    if config.passwd_file and not config.key_file:
        issues.append(
            ConfigIssue(setting.file_path("passwd_file"), "the password of key_file: set key_file too")
        )
    if config.crl_file and not config.ca_file:
        issues.append(
            ConfigIssue(
                setting.file_path("crl_file"),
                "revocation is checked against ca_file's certificates: set ca_file too",
            )
        )
    for name, value in config.paths.items():
        if not PurePosixPath(value).is_absolute():
            issues.append(
                ConfigIssue(
                    setting.file_path(name),
                    f"{value!r} must be an absolute path (components start in their own directories)",
                )
            )
