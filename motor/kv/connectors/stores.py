"""Prefix stores that bring their own backend: LMCache and UCM."""

from motor.kv.connectors.mooncake import READS_THE_POOL
from motor.kv.connectors.spec import ConnectorSpec, DispatchProfile, register

register(
    ConnectorSpec(
        "LMCacheConnectorV1",
        DispatchProfile.PREFILL_FIRST,
        READS_THE_POOL,
        pool_backend=True,
        needs_pool_master=True,
    )
)
register(
    ConnectorSpec(
        "UCMConnector",
        DispatchProfile.PREFILL_FIRST,
        "prefix store (UCM) of its own, usually on the prefill side only; the transfer connector moves KV to decode",
        pool_backend=True,
    )
)
