"""Entry point: parse flags, connect the pool, serve the ASGI app on uvicorn (uvloop + httptools)."""

import asyncio
import logging
import os
import socket
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import uvicorn

from motor.engine.sim.app import SimApp
from motor.engine.sim.capacity import CapacityModel
from motor.engine.sim.cli import parse_config
from motor.engine.sim.config import SimConfig
from motor.engine.sim.engine import SimEngine
from motor.engine.sim.faults import FaultInjector
from motor.engine.sim.kv_events import KvEventPublisher, PrefixCacheEvents
from motor.engine.sim.kv_pool import KvPool, StoreLink
from motor.engine.sim.metrics import EngineMetrics
from motor.engine.sim.virtual import VirtualEngines
from motor.kv.block_hashes import BlockHasher
from motor.kvstore.config import load_store_config
from motor.kvstore.errors import StoreError

if TYPE_CHECKING:
    # built only with --otlp-traces-endpoint (it loads the OpenTelemetry SDK)
    from motor.engine.sim.tracing import RequestSpans

log = logging.getLogger("motor.engine.sim")

CRASH_EXIT_CODE = 3
# Lets the response that completed the crash count reach the client before the process dies.
_CRASH_DELAY_S = 0.02
_STORE_THREADS = 4


def _crash(completed: int) -> None:
    log.error(
        "fault crash_after: %d requests completed, exiting now (exit code %d)", completed, CRASH_EXIT_CODE
    )
    sys.stderr.flush()
    asyncio.get_running_loop().call_later(_CRASH_DELAY_S, os._exit, CRASH_EXIT_CODE)


def _connect_store(config: SimConfig) -> StoreLink | None:
    if config.store_config_path is None:
        log.warning("no store config (--store-config or $MOONCAKE_CONFIG_PATH): no KV pool, no KV hand-over")
        return None
    store_config = load_store_config(config.store_config_path)
    link = StoreLink(store_config, local_hostname=config.host)
    link.connect()
    log.info("KV pool: mooncake_master at %s", store_config["master_server_address"])
    return link


def _banner(config: SimConfig, where: str) -> str:
    latency = config.latency
    if config.capacity.enabled:
        model = f"capacity model {_capacity_summary(config.capacity)}"
    else:
        model = (
            f"latency overhead {latency.overhead_ms:g} ms + {latency.prefill_ms_per_token:g} ms/uncached token, "
            f"ITL {latency.itl_ms:g} ms × (1 + {latency.itl_batch_factor:g}·(batch−1))"
        )
    ec = config.ec_transfer
    ec_role = "none" if ec is None else f"{ec.ec_role} ({ec.ec_connector_extra_config.shared_storage_path})"
    return (
        f"motor-sim {where}: a SIMULATOR for tests, not inference. "
        f"model {config.model_name!r}, kv_role "
        f"{config.kv_role}, ec_role {ec_role}, engine_id {config.engine_id!r}, block_size {config.block_size}, "
        f"kv_bytes_per_token {config.kv_bytes_per_token}, max_batch {config.max_batch}; {model}; faults "
        f"{config.faults.model_dump(exclude_defaults=True) or 'none'}"
    )


def _capacity_summary(capacity: CapacityModel) -> str:
    return ", ".join(f"{name}={value}" for name, value in vars(capacity).items() if name != "enabled")


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


def _listen_all(config: SimConfig) -> list[socket.socket]:
    """One listening socket per virtual engine: --port, --port + 1, ... (free ports for --port 0)."""
    listeners: list[socket.socket] = []
    for index in range(config.virtual_engines):
        port = config.port + index if config.port else 0
        try:
            listeners.append(_listen(config.host, port))
        except OSError as exc:
            for listener in listeners:
                listener.close()
            raise OSError(f"cannot listen on {config.host}:{port}: {exc}") from exc
    return listeners


def _kv_events(config: SimConfig) -> PrefixCacheEvents | None:
    if config.kv_events is None or not config.kv_events.publishes:
        return None
    publisher = KvEventPublisher(config.kv_events)
    log.info("KV events on %s (replay %s)", config.kv_events.endpoint, config.kv_events.replay_endpoint)
    hasher = BlockHasher(config.block_size, config.prefix_caching_hash_algo, config.hash_seed)
    return PrefixCacheEvents(publisher, hasher)


def _engine_app(config: SimConfig, link: StoreLink | None, executor: ThreadPoolExecutor | None) -> SimApp:
    metrics = EngineMetrics()
    faults = FaultInjector(config.faults, seed=config.seed, on_crash=_crash)
    pool = None
    if link is not None and executor is not None:
        pool = KvPool(link, executor=executor, faults=faults, metrics=metrics)
    engine = SimEngine(config, pool=pool, faults=faults, metrics=metrics, kv_events=_kv_events(config))
    return SimApp(
        config,
        engine=engine,
        faults=faults,
        metrics=metrics,
        pool_view=link.view if link is not None else None,
        tracer=_request_spans(config),
    )


def _request_spans(config: SimConfig) -> "RequestSpans | None":
    if not config.otlp_traces_endpoint:
        return None
    from motor.engine.sim.tracing import RequestSpans  # loads the OpenTelemetry SDK: only when asked

    return RequestSpans(config.otlp_traces_endpoint, f"motor-sim {config.engine_id or config.model_name}")


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_config(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=config.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        listeners = _listen_all(config)
    except OSError as exc:
        log.error("%s; choose another --port (0 picks a free one)", exc)
        return 1
    ports = [listener.getsockname()[1] for listener in listeners]
    if config.virtual_engines == 1:
        configs = [config.bound_to(ports[0])]
        log.warning(_banner(configs[0], f"engine on http://{config.host}:{ports[0]}"))
    else:
        configs = [config.virtual_engine(index, port) for index, port in enumerate(ports)]
        log.warning(_banner(configs[0], f"{len(configs)} virtual engines on {config.host} (engine 0 shown)"))
    try:
        link = _connect_store(config)
    except StoreError as exc:
        log.error("cannot use the KV pool: %s", exc)
        for listener in listeners:
            listener.close()
        return 1

    executor = None
    if link is not None:
        executor = ThreadPoolExecutor(max_workers=_STORE_THREADS, thread_name_prefix="sim-store")
    try:
        apps = {engine.port: _engine_app(engine, link, executor) for engine in configs}
    except OSError as exc:
        log.error("%s", exc)
        for listener in listeners:
            listener.close()
        if link is not None:
            link.close()
        return 1
    app = apps[ports[0]] if len(apps) == 1 else VirtualEngines(apps)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=config.host,
            port=ports[0],
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
    for engine in configs:
        if len(configs) == 1:
            log.warning("motor-sim listening on http://%s:%d", engine.host, engine.port)
        else:
            log.warning(
                "motor-sim listening on http://%s:%d (virtual engine %d, engine_id %s)",
                engine.host,
                engine.port,
                engine.engine_index,
                engine.engine_id,
            )
    try:
        server.run(sockets=listeners)
    finally:
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
        if link is not None:
            link.close()
    return 0 if server.started else 1
