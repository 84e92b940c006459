"""Optional persistence of the instance set in etcd (`etcd_config.enable_etcd_persistence`).

Each instance is one key `/motor/<job_id>/controller/instances/<instance id>` holding its last status, routing
data and node manager address; heartbeats are not written, only status and routing changes. A single writer
sends the latest state of every changed key, so a slow or briefly unreachable etcd never reorders or loses
an update: it is retried until written (on a fresh connection, which also renews an expired auth token).
A value that does not parse is logged and skipped at start: one bad key does not keep the controller down.
"""

import asyncio
import logging

import aetcd
import grpc
from pydantic import BaseModel, ConfigDict, ValidationError

from motor.controller.etcd_client import etcd_client
from motor.controller.registry import Change
from motor.protocol.instances import Instance
from motor.protocol.specs import EtcdSpec

ETCD_ERRORS = (aetcd.ClientError, grpc.aio.AioRpcError, TimeoutError)

log = logging.getLogger(__name__)

RETRY_S = 1.0


class PersistedInstance(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instance: Instance
    node_manager_url: str


class EtcdUnavailable(RuntimeError):
    pass


class EtcdStore:
    def __init__(self, spec: EtcdSpec, job_id: str, *, username: str = "", password: str = "") -> None:
        self._spec = spec
        self._prefix = f"/motor/{job_id}/controller/instances/"
        self._client = etcd_client(spec, username, password)
        self._authenticated = bool(username)
        self._dirty: dict[str, PersistedInstance | None] = {}
        self._wake = asyncio.Event()

    @property
    def where(self) -> str:
        scheme = "https" if self._spec.tls is not None else "http"
        return f"etcd at {scheme}://{self._spec.host}:{self._spec.port}"

    async def load(self) -> list[PersistedInstance]:
        try:
            async with asyncio.timeout(self._spec.timeout):
                await self._client.connect()
                found = await self._client.get_prefix(self._prefix.encode())
        except ETCD_ERRORS as exc:
            hint = (
                "check MOTOR_ETCD_USERNAME / MOTOR_ETCD_PASSWORD"
                if self._authenticated
                else "set MOTOR_ETCD_USERNAME / MOTOR_ETCD_PASSWORD if etcd requires authentication"
            )
            raise EtcdUnavailable(
                f"cannot read the persisted instance set from {self.where} within {self._spec.timeout} s "
                f"({type(exc).__name__}: {exc}); start etcd there, or fix motor_controller_config.etcd_config "
                f"(etcd_host, etcd_port) and etcd_tls_config, {hint}, or set enable_etcd_persistence to false"
            ) from exc
        restored = []
        for kv in found:
            try:
                restored.append(PersistedInstance.model_validate_json(kv.value))
            except ValidationError as exc:
                log.warning(
                    "skipping %s in %s: not a persisted instance (%s)",
                    kv.key.decode(errors="replace"),
                    self.where,
                    exc.errors()[0]["msg"],
                )
        return restored

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
            except ETCD_ERRORS as exc:
                log.warning("writing instance %s to %s failed (%s); retrying", instance_id, self.where, exc)
                await self._reconnect()
                await asyncio.sleep(RETRY_S)
                continue
            if self._dirty.get(instance_id, value) is value:
                self._dirty.pop(instance_id, None)

    async def close(self) -> None:
        await self._client.close()

    async def _reconnect(self) -> None:
        """Drop the connection: the next call opens a new one and authenticates again."""
        try:
            await self._client.close()
        except ETCD_ERRORS as exc:
            log.debug("closing the etcd connection: %s", exc)

    async def _write(self, instance_id: str, value: PersistedInstance | None) -> None:
        key = (self._prefix + instance_id).encode()
        async with asyncio.timeout(self._spec.timeout):
            if value is None:
                await self._client.delete(key)
            else:
                await self._client.put(key, value.model_dump_json().encode())
