"""Which addresses a registration may announce: the controller calls the node manager URL it names and the
coordinators send client requests to its endpoints, so nothing outside the job's topology gets in (no SSRF
through registration).

A registration is admitted when its instance id is `<role>-<index>` of its role, its node manager URL is
`scheme://IP:port` with nothing else, every endpoint is on that same IP, the IP lies in the policy's networks,
and the ports are the ones the plan gives that role (on a shared host, those of one ordinal k:
node_manager_port + k, engine_port + 2k and the next port for status, bootstrap_port + index).
"""

import ipaddress
import re
from urllib.parse import urlsplit

from motor.protocol.controller import Registration
from motor.protocol.instances import Endpoint, InstanceRole
from motor.protocol.specs import RegistrationPolicy, RolePorts

_INSTANCE_ID = re.compile(r"^(?P<role>[a-z]+)-(?P<index>[0-9]+)$")


class AddressRefused(ValueError):
    """A registration names an address outside the policy; the message names the field and the rule."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def check_registration(registration: Registration, policy: RegistrationPolicy) -> None:
    """Raise AddressRefused unless `registration` keeps to `policy`."""
    check_addresses(
        registration.instance_id,
        registration.role,
        registration.node_manager_url,
        registration.endpoints,
        policy,
    )


def check_addresses(
    instance_id: str,
    role: InstanceRole,
    node_manager_url: str,
    endpoints: list[Endpoint],
    policy: RegistrationPolicy,
) -> None:
    """Raise AddressRefused unless instance `instance_id` of `role` may be reached at these addresses (a
    registration's, or an instance's restored from etcd)."""
    index = _index(instance_id, role, policy)
    ports = policy.roles[role]
    host, node_manager_port = _node_manager_address(node_manager_url, policy)
    ordinal = _ordinal(node_manager_port, ports, policy)
    if ordinal is None:
        raise AddressRefused(
            "node_manager_url",
            f"port {node_manager_port} is not a node manager port of role {role} "
            f"({_port_rule(ports.node_manager_port, 1, policy)})",
        )
    for position, endpoint in enumerate(endpoints):
        _check_endpoint(endpoint, f"endpoints.{position}", host, ports, ordinal, index, policy)


def node_manager_base_url(url: str, policy: RegistrationPolicy) -> str:
    """`scheme://host:port` of a node manager URL the policy admits (AddressRefused otherwise): the controller
    builds every call from these parts only."""
    host, port = _node_manager_address(url, policy)
    if all(_ordinal(port, ports, policy) is None for ports in policy.roles.values()):
        raise AddressRefused("node_manager_url", f"port {port} is not a node manager port of this deployment")
    shown = f"[{host}]" if ":" in host else host
    return f"{policy.scheme}://{shown}:{port}"


def _ordinal(node_manager_port: int, ports: RolePorts, policy: RegistrationPolicy) -> int | None:
    """Which node manager of the role listens on `node_manager_port` (None: none does)."""
    ordinal = node_manager_port - ports.node_manager_port
    return ordinal if 0 <= ordinal < (policy.ordinals if policy.shared_host else 1) else None


def _index(instance_id: str, role: InstanceRole, policy: RegistrationPolicy) -> int:
    match = _INSTANCE_ID.match(instance_id)
    if match is None or match["role"] != role:
        raise AddressRefused(
            "instance_id",
            f"{instance_id!r} is not an instance of role {role} (motor names them {role}-0, {role}-1, ...)",
        )
    if role not in policy.roles:
        raise AddressRefused("role", f"this deployment has no {role} instances")
    return int(match["index"])


def _node_manager_address(url: str, policy: RegistrationPolicy) -> tuple[str, int]:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise AddressRefused("node_manager_url", f"{url!r} is not a URL: {exc}") from None
    if parts.scheme != policy.scheme:
        raise AddressRefused(
            "node_manager_url", f"{url!r}: node managers of this deployment are reached over {policy.scheme}"
        )
    if parts.username is not None or parts.password is not None or parts.query or parts.fragment:
        raise AddressRefused("node_manager_url", f"{url!r} carries more than scheme, host and port")
    if parts.path not in ("", "/"):
        raise AddressRefused("node_manager_url", f"{url!r} carries a path")
    if port is None:
        raise AddressRefused("node_manager_url", f"{url!r} names no port")
    host = _allowed_ip(parts.hostname or "", "node_manager_url", policy)
    return host, port


def _check_endpoint(
    endpoint: Endpoint,
    field: str,
    host: str,
    ports: RolePorts,
    ordinal: int,
    index: int,
    policy: RegistrationPolicy,
) -> None:
    if _allowed_ip(endpoint.host, f"{field}.host", policy) != host:
        raise AddressRefused(f"{field}.host", f"{endpoint.host} is not the node manager's host {host}")
    engine_port = ports.engine_port + 2 * ordinal
    if endpoint.port != engine_port:
        raise AddressRefused(
            f"{field}.port",
            f"{endpoint.port} is not the engine port of this node manager ({engine_port}: "
            f"{_port_rule(ports.engine_port, 2, policy)})",
        )
    if endpoint.status_port not in (None, engine_port + 1):
        raise AddressRefused(
            f"{field}.status_port",
            f"{endpoint.status_port} is not the engine's status port {engine_port + 1}",
        )
    if endpoint.bootstrap_port is not None:
        if ports.bootstrap_port is None:
            raise AddressRefused(f"{field}.bootstrap_port", "this role serves no KV bootstrap endpoint")
        bootstrap = ports.bootstrap_port + (index if policy.shared_host else 0)
        if endpoint.bootstrap_port != bootstrap:
            raise AddressRefused(
                f"{field}.bootstrap_port", f"{endpoint.bootstrap_port} is not this instance's {bootstrap}"
            )


def _allowed_ip(host: str, field: str, policy: RegistrationPolicy) -> str:
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        raise AddressRefused(field, f"{host!r} is not an IP address (registrations name pod IPs)") from None
    if not any(address in ipaddress.ip_network(network) for network in policy.networks):
        raise AddressRefused(
            field,
            f"{address} is outside the job's networks ({', '.join(policy.networks)}; on Kubernetes set "
            "motor_deploy_config.pod_networks to your pod network)",
        )
    return str(address)


def _port_rule(base: int, step: int, policy: RegistrationPolicy) -> str:
    if not policy.shared_host:
        return f"{base}"
    return f"{base} + {step}k for an instance of ordinal k below {policy.ordinals}"
