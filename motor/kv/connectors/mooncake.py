"""Mooncake's connectors: vLLM's MooncakeConnector and store connector, vllm-ascend's Mooncake family."""

from motor.kv.connectors.spec import ConnectorSpec, DispatchProfile, register

PULL_NAMED_BY_PREFILL = "decode pulls KV named by the prefill response"
READS_THE_POOL = "KV pool backend: decode reads the prefill's KV from the pool"

register(
    ConnectorSpec(
        "MooncakeLayerwiseConnector",
        DispatchProfile.DECODE_FIRST,
        "pushes KV layer by layer into the decode engine, which asks the coordinator for the prefill (metaserver)",
        patches=("multi-connector-push-blocks",),
    )
)
register(ConnectorSpec("MooncakeConnectorV1", DispatchProfile.PREFILL_FIRST, PULL_NAMED_BY_PREFILL))
register(ConnectorSpec("MooncakeHybridConnector", DispatchProfile.PREFILL_FIRST, PULL_NAMED_BY_PREFILL))
register(
    ConnectorSpec(
        "MooncakeConnector",
        DispatchProfile.CONCURRENT,
        "vLLM's transfer-id contract: both legs carry one transfer_id and decode pulls from the prefill's "
        "bootstrap address while the prefill runs",
        bootstrap_port_env="VLLM_MOONCAKE_BOOTSTRAP_PORT",
        patches=("multi-connector-unlisted-metrics", "cpu-mooncake-device-index"),
    )
)
register(
    ConnectorSpec(
        "MooncakeStoreConnector",
        DispatchProfile.PREFILL_FIRST,
        READS_THE_POOL,
        pool_backend=True,
        needs_pool_master=True,
        lookup_id_key="lookup_rpc_port",
    )
)
register(
    ConnectorSpec(
        "MooncakeConnectorStoreV1",
        DispatchProfile.PREFILL_FIRST,
        READS_THE_POOL,
        pool_backend=True,
        needs_pool_master=True,
        lookup_id_key="mooncake_rpc_port",
    )
)
