"""One KV connector as motor knows it, and the registry connectors are looked up in by name.

A connector's spec holds everything motor decides from its name: the dispatch profile it implies when it is the
transfer connector, whether it is a pool backend (and whether that pool is the Mooncake master motor deploys),
the extra-config key of its host-local lookup socket, whether a producer serves a KV bootstrap endpoint and
through which environment variable, and which of motor's gated engine patches concern it. Adding a connector is
one `register(ConnectorSpec(...))` in the file of its family.
"""

from dataclasses import dataclass
from enum import StrEnum


class DispatchProfile(StrEnum):
    PREFILL_FIRST = "prefill_first"
    DECODE_FIRST = "decode_first"
    CONCURRENT = "concurrent"
    AGGREGATED = "aggregated"


@dataclass(frozen=True)
class ConnectorSpec:
    name: str  # vLLM's (or vllm-ascend's) kv_connector name, spelled as they spell it
    profile: DispatchProfile  # how requests cross P and D when this is the transfer connector
    why: str  # one line: how it moves KV, shown by `motor validate`
    pool_backend: bool = (
        False  # a prefix store; never decides the profile, may sit one-sided after the transfer one
    )
    needs_pool_master: bool = (
        False  # stores into the Mooncake pool motor deploys (needs kv_cache_pool_config)
    )
    lookup_id_key: str | None = (
        None  # extra-config key of its host-local lookup socket id (an IPC path, not a port)
    )
    bootstrap_port_env: str | None = None  # a producer serves a KV bootstrap endpoint on the port this names
    patches: tuple[str, ...] = ()  # names of motor's gated engine patches that fix this connector

    @property
    def serves_bootstrap(self) -> bool:
        return self.bootstrap_port_env is not None


class DuplicateConnectorError(ValueError):
    pass


REGISTRY: dict[str, ConnectorSpec] = {}


def register(spec: ConnectorSpec) -> ConnectorSpec:
    if spec.name in REGISTRY:
        raise DuplicateConnectorError(f"connector {spec.name!r} is registered twice")
    REGISTRY[spec.name] = spec
    return spec
