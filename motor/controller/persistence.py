"""Optional persistence of the instance set in etcd (`etcd_config.enable_etcd_persistence`).

Each instance is one key `/motor/<job_id>/controller/instances/<instance id>` holding its last status, routing
data and node manager address; heartbeats are not written, only status and routing changes. A single writer
sends the latest state of every changed key, so a slow or briefly unreachable etcd never reorders or loses
an update: it is retried until written.
"""

import asyncio
import logging

import aetcd
from pydantic import BaseModel, ConfigDict

from motor.config.models import EtcdConfig
from motor.controller.registry import Change
from motor.protocol.instances import Instance

log = logging.getLogger(__name__)

RETRY_S = 1.0


class PersistedInstance(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instance: Instance
    node_manager_url: str


class EtcdUnavailable(RuntimeError):
    pass


class EtcdStore:
    def __init__(self, config: EtcdConfig, job_id: str) -> None:
        self._config = config
        self._prefix = f"/motor/{job_id}/controller/instances/"
        self._client = aetcd.Client(config.etcd_host, config.etcd_port, timeout=config.etcd_timeout)
        self._dirty: dict[str, PersistedInstance | None] = {}
        self._wake = asyncio.Event()

    @property
    def where(self) -> str:
        return f"etcd at {self._config.etcd_host}:{self._config.etcd_port}"

    async def load(self) -> list[PersistedInstance]:
        try:
            async with asyncio.timeout(self._config.etcd_timeout):
                await self._client.connect()
                found = await self._client.get_prefix(self._prefix.encode())
        except (aetcd.ClientError, TimeoutError) as exc:
            raise EtcdUnavailable(
                f"cannot read the persisted instance set from {self.where} within {self._config.etcd_timeout} s "
                f"({type(exc).__name__}: {exc}); start etcd there, or fix motor_controller_config.etcd_config "
                "(etcd_host, etcd_port), or set enable_etcd_persistence to false"
            ) from exc
        return [PersistedInstance.model_validate_json(kv.value) for kv in found]

    def stage(self, change: Change) -> None:
        instance = change.instance
        self._dirty[instance.id] = (
            None
            if instance.status == "deleted"
            else PersistedInstance(instance=instance, node_manager_url=change.node_manager_url)
        )
        self._wake.set()

    async def run(self) -> None:
        while True:
            if not self._dirty:
                self._wake.clear()
                await self._wake.wait()
            instance_id, value = next(iter(self._dirty.items()))
            try:
                await self._write(instance_id, value)
            except (aetcd.ClientError, TimeoutError) as exc:
                log.warning("writing instance %s to %s failed (%s); retrying", instance_id, self.where, exc)
                await asyncio.sleep(RETRY_S)
                continue
            if self._dirty.get(instance_id, value) is value:
                self._dirty.pop(instance_id, None)

    async def close(self) -> None:
        await self._client.close()

    async def _write(self, instance_id: str, value: PersistedInstance | None) -> None:
        key = (self._prefix + instance_id).encode()
        async with asyncio.timeout(self._config.etcd_timeout):
            if value is None:
                await self._client.delete(key)
            else:
                await self._client.put(key, value.model_dump_json().encode())
