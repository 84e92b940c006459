"""vLLM's own transfer connectors other than Mooncake's."""

from motor.kv.connectors.spec import ConnectorSpec, DispatchProfile, register

register(
    ConnectorSpec(
        "NixlConnector",
        DispatchProfile.PREFILL_FIRST,
        "decode pulls the remote blocks returned by the prefill",
    )
)
register(
    ConnectorSpec(
        "P2pNcclConnector",
        DispatchProfile.PREFILL_FIRST,
        "prefill sends KV to the decode named in its request",
    )
)
register(
    ConnectorSpec(
        "ExampleConnector",
        DispatchProfile.PREFILL_FIRST,
        "shared storage: decode reads what the prefill saved",
    )
)
