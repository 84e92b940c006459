"""The KV-cache pool: `kv_cache_pool_config` defaults, the `mooncake_master` command and the engine store config.

Pure: turns configuration into argument lists and dictionaries; starting processes is `motor.pool`'s job.
"""

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, Strict

from motor.kv.sizes import format_size, parse_size

DEFAULT_POOL_PORT = 50088
DEFAULT_METRICS_PORT = 9003
DEFAULT_LEASE_TTL_MS = 11000
# mooncake_master's --allocation_strategy values: where the master places a new object's replica.
AllocationStrategy = Literal["random", "free_ratio_first", "local_first", "cxl", "ssd_free_ratio_first"]

ByteSize = Annotated[int, BeforeValidator(parse_size), PlainSerializer(format_size, return_type=str)]


class KvCachePoolConfig(BaseModel):
    """`kv_cache_pool_config` of user_config.json, with the seed document's defaults.

    Keys motor does not interpret are kept and copied into the engines' store config, as pyMotor copies the
    whole section into its Mooncake config file.
    """

    model_config = ConfigDict(extra="allow")

    metadata_server: str = "P2PHANDSHAKE"
    protocol: str = "ascend"
    device_name: str = ""
    global_segment_size: ByteSize = Field(default=1 << 30, gt=0)
    local_buffer_size: ByteSize = Field(default=128 << 20, ge=0)
    eviction_high_watermark_ratio: Annotated[float, Strict()] = Field(default=0.9, gt=0, le=1)
    eviction_ratio: Annotated[float, Strict()] = Field(default=0.1, gt=0, le=1)
    port: Annotated[int, Strict()] = Field(default=DEFAULT_POOL_PORT, ge=1, le=65535)
    metrics_port: Annotated[int, Strict()] = Field(default=DEFAULT_METRICS_PORT, ge=1, le=65535)
    default_kv_lease_ttl: Annotated[int, Strict()] = Field(
        default=DEFAULT_LEASE_TTL_MS, gt=0, description="milliseconds"
    )
    # None: the master's own default (random). local_first puts an engine's blocks into its own segment while it has
    # room, so engines sharing a host do not write into each other's segments over TCP.
    allocation_strategy: AllocationStrategy | None = None


def master_args(pool: KvCachePoolConfig, *, bind_host: str) -> list[str]:
    """Arguments for `mooncake_master` (without the binary), binding RPC and metrics to `bind_host`."""
    return [
        f"--rpc_port={pool.port}",
        f"--rpc_address={bind_host}",
        f"--metrics_port={pool.metrics_port}",
        f"--metrics_host={bind_host}",
        f"--eviction_high_watermark_ratio={pool.eviction_high_watermark_ratio}",
        f"--eviction_ratio={pool.eviction_ratio}",
        f"--default_kv_lease_ttl={pool.default_kv_lease_ttl}",
        *([f"--allocation_strategy={pool.allocation_strategy}"] if pool.allocation_strategy else []),
    ]


def engine_store_config(pool: KvCachePoolConfig, *, master_host: str) -> dict[str, Any]:
    """The JSON engines read through `MOONCAKE_CONFIG_PATH` (sizes in bytes, as the store's setup takes them)."""
    return {
        **(pool.model_extra or {}),
        "master_server_address": f"{master_host}:{pool.port}",
        "metadata_server": pool.metadata_server,
        "protocol": pool.protocol,
        "device_name": pool.device_name,
        "global_segment_size": pool.global_segment_size,
        "local_buffer_size": pool.local_buffer_size,
    }


def metrics_url(pool: KvCachePoolConfig, *, master_host: str) -> str:
    return f"http://{master_host}:{pool.metrics_port}/metrics"
