"""vllm-ascend's store connector (its transfer connectors are Mooncake's, see mooncake.py)."""

from motor.kv.connectors.mooncake import READS_THE_POOL
from motor.kv.connectors.spec import ConnectorSpec, DispatchProfile, register

register(
    ConnectorSpec(
        "AscendStoreConnector",
        DispatchProfile.PREFILL_FIRST,
        READS_THE_POOL,
        pool_backend=True,
        needs_pool_master=True,
        lookup_id_key="lookup_rpc_port",
    )
)
