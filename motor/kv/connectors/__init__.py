"""The KV connectors motor recognises (the recognition whitelist), one `ConnectorSpec` each, looked up by name.

For a `MultiConnector` only `connectors[0]` (the transfer connector) decides the dispatch profile; pool backends
never decide and need not be listed as transfer connectors. The families register themselves on import below.
"""

from motor.kv.connectors import ascend, mooncake, stores, vllm  # noqa: F401  (they register their specs)
from motor.kv.connectors.spec import (
    REGISTRY,
    ConnectorSpec,
    DispatchProfile,
    DuplicateConnectorError,
    register,
)

MULTI_CONNECTOR = "MultiConnector"

__all__ = [
    "MULTI_CONNECTOR",
    "REGISTRY",
    "ConnectorSpec",
    "DispatchProfile",
    "DuplicateConnectorError",
    "is_pool_backend",
    "known_transfer_connectors",
    "lookup",
    "lookup_id_key",
    "needs_pool_master",
    "register",
    "serves_bootstrap",
]


def lookup(name: str) -> ConnectorSpec | None:
    return REGISTRY.get(name)


def is_pool_backend(name: str) -> bool:
    spec = REGISTRY.get(name)
    return spec is not None and spec.pool_backend


def needs_pool_master(name: str) -> bool:
    spec = REGISTRY.get(name)
    return spec is not None and spec.needs_pool_master


def serves_bootstrap(name: str) -> bool:
    """True when a producer with this transfer connector serves a KV bootstrap endpoint on its kv_port."""
    spec = REGISTRY.get(name)
    return spec is not None and spec.serves_bootstrap


def lookup_id_key(name: str) -> str | None:
    spec = REGISTRY.get(name)
    return spec.lookup_id_key if spec is not None else None


def known_transfer_connectors() -> list[str]:
    return sorted(REGISTRY)
