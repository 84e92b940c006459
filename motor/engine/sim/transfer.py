"""The engine side of the kv_transfer_params contract (docs/kv_transfer_params.md), one path per profile.

Prefill leg (`do_remote_decode`): the engine writes its blocks to the pool and answers with
`prefill_result_params` naming them; with a `transfer_id` it also publishes a manifest under that id.

Decode leg (`do_remote_prefill`), by what the params carry:
- `remote_block_keys` (prefill_first): the keys the prefill returned, passed on by the coordinator;
- `metaserver` (decode_first): POST the callback body, the coordinator runs the prefill and answers with
  its response, whose kv_transfer_params name the keys;
- `transfer_id` (concurrent): poll the pool for the prefill's manifest until --kv-wait-timeout-s;
- none of these: find the prompt's own blocks in the pool by hash (store-style connectors).
"""

import logging
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tenacity import AsyncRetrying, RetryCallState, retry_if_result

from motor.engine.sim.config import SimConfig
from motor.engine.sim.errors import SimError, bad_request
from motor.engine.sim.kv_blocks import transfer_key
from motor.engine.sim.kv_pool import KvPool
from motor.runtime.backoff import Backoff

if TYPE_CHECKING:
    import aiohttp

log = logging.getLogger(__name__)

MANIFEST_POLL = Backoff(initial_s=0.002, factor=2.0, cap_s=0.05)


@dataclass(frozen=True)
class TransferRequest:
    """The kv_transfer_params a request arrived with."""

    remote_decode: bool = False
    remote_prefill: bool = False
    transfer_id: str | None = None
    metaserver: str | None = None
    remote_block_keys: tuple[str, ...] | None = None
    remote_engine_id: str | None = None


def parse_transfer_params(raw: Any) -> TransferRequest | None:
    if raw is None:
        return None
    param = "kv_transfer_params"
    if not isinstance(raw, dict):
        raise bad_request("kv_transfer_params must be an object or null", param=param)
    for flag in ("do_remote_decode", "do_remote_prefill"):
        if not isinstance(raw.get(flag, False), bool):
            raise bad_request(f"kv_transfer_params.{flag} must be true or false", param=param)
    transfer_id = raw.get("transfer_id")
    if transfer_id is not None and not isinstance(transfer_id, str | int):
        raise bad_request("kv_transfer_params.transfer_id must be a string", param=param)
    metaserver = raw.get("metaserver")
    if metaserver is not None and not (isinstance(metaserver, str) and metaserver.startswith("http")):
        raise bad_request("kv_transfer_params.metaserver must be an http:// callback URL", param=param)
    keys = raw.get("remote_block_keys")
    if keys is not None and not (isinstance(keys, list) and all(isinstance(key, str) for key in keys)):
        raise bad_request("kv_transfer_params.remote_block_keys must be a list of strings", param=param)
    engine_id = raw.get("remote_engine_id")
    return TransferRequest(
        remote_decode=raw.get("do_remote_decode", False),
        remote_prefill=raw.get("do_remote_prefill", False),
        transfer_id=None if transfer_id is None else str(transfer_id),
        metaserver=metaserver,
        remote_block_keys=None if keys is None else tuple(keys),
        remote_engine_id=engine_id if isinstance(engine_id, str) else None,
    )


def prefill_result_params(
    config: SimConfig, *, block_keys: list[str], transfer_id: str | None, kv_error: str | None
) -> dict[str, Any]:
    """What a prefill leg answers with: where the decode finds the KV (an empty key list means none)."""
    params: dict[str, Any] = {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_engine_id": config.engine_id,
        "remote_host": config.host,
        "remote_port": config.port,
        "remote_block_keys": block_keys,
        "remote_block_size": config.block_size,
        "remote_num_tokens": len(block_keys) * config.block_size,
    }
    if transfer_id is not None:
        params["transfer_id"] = transfer_id
    if kv_error is not None:
        params["kv_error"] = kv_error
    return params


def transfer_manifest(config: SimConfig, *, block_keys: list[str], kv_error: str | None) -> dict[str, Any]:
    return {"engine_id": config.engine_id, "block_keys": block_keys, "kv_error": kv_error}


class RemoteKvLocator:
    """Finds the pool keys of the KV a remote prefill produced for a decode leg."""

    def __init__(self, config: SimConfig, pool: KvPool | None) -> None:
        self._config = config
        self._pool = pool
        self._session: aiohttp.ClientSession | None = None

    async def block_keys(self, request_id: str, transfer: TransferRequest) -> list[str] | None:
        """The remote prefill's block keys, or None when the decode should look up its own blocks."""
        if transfer.metaserver is not None:
            return await self._via_callback(request_id, transfer.metaserver)
        if transfer.remote_block_keys is not None:
            return list(transfer.remote_block_keys)
        if transfer.transfer_id is not None:
            return await self._via_manifest(
                transfer.transfer_id, time.monotonic() + self._config.kv_wait_timeout_s
            )
        return None

    async def _via_callback(self, request_id: str, url: str) -> list[str] | None:
        import aiohttp  # only decode_first needs an HTTP client: keeps engine start-up fast

        transfer_id = f"push-{uuid.uuid4().hex}"
        body = {
            "request_id": request_id,
            "do_remote_decode": True,
            "do_remote_prefill": False,
            "remote_engine_id": self._config.engine_id,
            "remote_host": self._config.host,
            "remote_port": self._config.port,
            "transfer_id": transfer_id,
        }
        deadline = time.monotonic() + self._config.kv_wait_timeout_s
        timeout = self._config.kv_wait_timeout_s
        try:
            session = self._client()
            async with session.post(url, json=body, timeout=aiohttp.ClientTimeout(total=timeout)) as response:
                text = await response.text()
                if response.status >= 300:
                    raise SimError(
                        502,
                        f"decode_first: the prefill callback {url} answered HTTP {response.status}: {text[:500]}",
                    )
                try:
                    answer = await response.json(content_type=None)
                except ValueError:
                    raise SimError(
                        502, f"decode_first: the prefill callback {url} answered non-JSON"
                    ) from None
        except TimeoutError:
            raise SimError(
                504, f"decode_first: the prefill callback {url} did not answer within {timeout:g}s"
            ) from None
        except aiohttp.ClientError as exc:
            raise SimError(502, f"decode_first: the prefill callback {url} failed: {exc}") from None
        params = answer.get("kv_transfer_params") if isinstance(answer, dict) else None
        if isinstance(params, dict) and isinstance(params.get("remote_block_keys"), list):
            if params.get("kv_error"):
                log.warning("request %s: prefill reported no KV: %s", request_id, params["kv_error"])
            return [key for key in params["remote_block_keys"] if isinstance(key, str)]
        return await self._via_manifest(transfer_id, deadline)

    async def _via_manifest(self, transfer_id: str, deadline: float) -> list[str] | None:
        if self._pool is None:
            log.warning("transfer %s: no KV pool configured, the decode recomputes the prompt", transfer_id)
            return []
        key = transfer_key(self._config.model_name, transfer_id)

        def until_deadline(state: RetryCallState) -> float:
            return min(MANIFEST_POLL.wait(state), max(0.0, deadline - time.monotonic()))

        polling = AsyncRetrying(
            retry=retry_if_result(lambda manifest: manifest is None),
            wait=until_deadline,
            stop=lambda _: time.monotonic() >= deadline,
            retry_error_callback=lambda _: None,
        )
        manifest = await polling(self._pool.read_manifest, key)
        if manifest is None:
            raise SimError(
                504,
                f"timed out after {self._config.kv_wait_timeout_s:g}s waiting for the KV of transfer "
                f"{transfer_id} (no manifest at pool key {key}); check that its prefill leg runs on a "
                "kv_producer/kv_both engine serving the same model with the same pool",
            )
        if manifest.get("kv_error"):
            log.warning("transfer %s: prefill reported no KV: %s", transfer_id, manifest["kv_error"])
        keys = manifest.get("block_keys")
        return [key for key in keys if isinstance(key, str)] if isinstance(keys, list) else []

    def _client(self) -> "aiohttp.ClientSession":
        if self._session is None:
            import aiohttp

            self._session = aiohttp.ClientSession()
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
