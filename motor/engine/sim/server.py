"""Entry point: parse flags, connect the pool, serve the ASGI app on uvicorn (uvloop + httptools)."""

import asyncio
import logging
import os
import socket
import sys
from collections.abc import Sequence

import uvicorn

from motor.engine.sim.app import SimApp
from motor.engine.sim.cli import parse_config
from motor.engine.sim.config import SimConfig
from motor.engine.sim.engine import SimEngine
from motor.engine.sim.faults import FaultInjector
from motor.engine.sim.kv_pool import KvPool
from motor.engine.sim.metrics import EngineMetrics
from motor.pool.store import StoreClient, StoreError, load_store_config

log = logging.getLogger("motor.engine.sim")

CRASH_EXIT_CODE = 3
# Lets the response that completed the crash count reach the client before the process dies.
_CRASH_DELAY_S = 0.02


def _crash(completed: int) -> None:
    log.error(
        "fault crash_after: %d requests completed, exiting now (exit code %d)", completed, CRASH_EXIT_CODE
    )
    sys.stderr.flush()
    asyncio.get_running_loop().call_later(_CRASH_DELAY_S, os._exit, CRASH_EXIT_CODE)


def _connect_store(config: SimConfig) -> StoreClient | None:
    if config.store_config_path is None:
        log.warning("no store config (--store-config or $MOONCAKE_CONFIG_PATH): no KV pool, no KV hand-over")
        return None
    store_config = load_store_config(config.store_config_path)
    client = StoreClient.connect(store_config, local_hostname=config.host)
    log.info("KV pool: mooncake_master at %s", store_config["master_server_address"])
    return client


def _banner(config: SimConfig) -> str:
    latency = config.latency
    return (
        f"motor-sim engine on http://{config.host}:{config.port}: a SIMULATOR for tests, not inference. "
        f"model {config.model_name!r}, kv_role "
        f"{config.kv_role}, engine_id {config.engine_id!r}, block_size {config.block_size}, "
        f"kv_bytes_per_token {config.kv_bytes_per_token}, max_batch {config.max_batch}; latency overhead "
        f"{latency.overhead_ms:g} ms + {latency.prefill_ms_per_token:g} ms/uncached token, ITL "
        f"{latency.itl_ms:g} ms × (1 + {latency.itl_batch_factor:g}·(batch−1)); faults "
        f"{config.faults.model_dump(exclude_defaults=True) or 'none'}"
    )


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_config(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=config.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        listener = _listen(config.host, config.port)
    except OSError as exc:
        log.error(
            "cannot listen on %s:%d: %s; choose another --port (0 picks a free one)",
            config.host,
            config.port,
            exc,
        )
        return 1
    config = config.bound_to(listener.getsockname()[1])
    log.warning(_banner(config))
    try:
        client = _connect_store(config)
    except StoreError as exc:
        log.error("cannot use the KV pool: %s", exc)
        listener.close()
        return 1

    metrics = EngineMetrics()
    faults = FaultInjector(config.faults, seed=config.seed, on_crash=_crash)
    pool = None if client is None else KvPool(client, faults=faults, metrics=metrics)
    engine = SimEngine(config, pool=pool, faults=faults, metrics=metrics)
    app = SimApp(config, engine=engine, faults=faults, metrics=metrics)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=config.host,
            port=config.port,
            loop="uvloop",
            http="httptools",
            lifespan="on",
            access_log=False,
            log_config=None,
            log_level=logging.WARNING,
            proxy_headers=False,
            server_header=False,
            date_header=False,
        )
    )
    log.warning("motor-sim listening on http://%s:%d", config.host, config.port)
    try:
        server.run(sockets=[listener])
    finally:
        if pool is not None:
            pool.close()
        if client is not None:
            client.close()
    return 0 if server.started else 1
