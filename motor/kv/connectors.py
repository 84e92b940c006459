"""Connector capability registry: which dispatch profile a KV transfer connector needs, which are pool backends.

This is the recognition whitelist. For a `MultiConnector` only `connectors[0]` (the transfer connector) decides;
pool backends never decide and need not be listed as transfer connectors.
"""

from dataclasses import dataclass
from enum import StrEnum


class DispatchProfile(StrEnum):
    PREFILL_FIRST = "prefill_first"
    DECODE_FIRST = "decode_first"
    CONCURRENT = "concurrent"
    AGGREGATED = "aggregated"


@dataclass(frozen=True)
class ConnectorCapability:
    name: str
    profile: DispatchProfile
    pool_backend: bool
    why: str
    serves_bootstrap: bool = False
    # Extra-config key naming the store connector's host-local lookup socket (an IPC path id, not a TCP port).
    lookup_id_key: str | None = None
    # A pool backend that stores into the Mooncake pool motor deploys (needs kv_cache_pool_config).
    needs_pool_master: bool = False


MULTI_CONNECTOR = "MultiConnector"

_CAPABILITIES = [
    ConnectorCapability(
        "MooncakeLayerwiseConnector",
        DispatchProfile.DECODE_FIRST,
        False,
        "pushes KV layer by layer into the decode engine, which asks the coordinator for the prefill (metaserver)",
    ),
    ConnectorCapability(
        "MooncakeConnectorV1",
        DispatchProfile.PREFILL_FIRST,
        False,
        "decode pulls KV named by the prefill response",
    ),
    ConnectorCapability(
        "MooncakeHybridConnector",
        DispatchProfile.PREFILL_FIRST,
        False,
        "decode pulls KV named by the prefill response",
    ),
    ConnectorCapability(
        "NixlConnector",
        DispatchProfile.PREFILL_FIRST,
        False,
        "decode pulls the remote blocks returned by the prefill",
    ),
    ConnectorCapability(
        "P2pNcclConnector",
        DispatchProfile.PREFILL_FIRST,
        False,
        "prefill sends KV to the decode named in its request",
    ),
    ConnectorCapability(
        "ExampleConnector",
        DispatchProfile.PREFILL_FIRST,
        False,
        "shared storage: decode reads what the prefill saved",
    ),
    ConnectorCapability(
        "MooncakeConnector",
        DispatchProfile.CONCURRENT,
        False,
        "vLLM's transfer-id contract: both legs carry one transfer_id and decode pulls from the prefill's "
        "bootstrap address while the prefill runs",
        serves_bootstrap=True,
    ),
    ConnectorCapability(
        "AscendStoreConnector",
        DispatchProfile.PREFILL_FIRST,
        True,
        "KV pool backend: decode reads the prefill's KV from the pool",
        lookup_id_key="lookup_rpc_port",
        needs_pool_master=True,
    ),
    ConnectorCapability(
        "MooncakeStoreConnector",
        DispatchProfile.PREFILL_FIRST,
        True,
        "KV pool backend: decode reads the prefill's KV from the pool",
        lookup_id_key="lookup_rpc_port",
        needs_pool_master=True,
    ),
    ConnectorCapability(
        "MooncakeConnectorStoreV1",
        DispatchProfile.PREFILL_FIRST,
        True,
        "KV pool backend: decode reads the prefill's KV from the pool",
        lookup_id_key="mooncake_rpc_port",
        needs_pool_master=True,
    ),
    ConnectorCapability(
        "LMCacheConnectorV1",
        DispatchProfile.PREFILL_FIRST,
        True,
        "KV pool backend: decode reads the prefill's KV from the pool",
        needs_pool_master=True,
    ),
    ConnectorCapability(
        "UCMConnector",
        DispatchProfile.PREFILL_FIRST,
        True,
        "prefix store (UCM) of its own, usually on the prefill side only; the transfer connector moves KV to decode",
    ),
]

REGISTRY: dict[str, ConnectorCapability] = {c.name: c for c in _CAPABILITIES}


def lookup(name: str) -> ConnectorCapability | None:
    return REGISTRY.get(name)


def is_pool_backend(name: str) -> bool:
    capability = REGISTRY.get(name)
    return capability is not None and capability.pool_backend


def needs_pool_master(name: str) -> bool:
    capability = REGISTRY.get(name)
    return capability is not None and capability.needs_pool_master


def serves_bootstrap(name: str) -> bool:
    """True when a producer with this transfer connector serves a KV bootstrap endpoint on its kv_port."""
    capability = REGISTRY.get(name)
    return capability is not None and capability.serves_bootstrap


def lookup_id_key(name: str) -> str | None:
    capability = REGISTRY.get(name)
    return capability.lookup_id_key if capability is not None else None


def known_transfer_connectors() -> list[str]:
    return sorted(REGISTRY)
