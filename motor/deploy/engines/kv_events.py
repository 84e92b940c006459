"""The engine's `kv-events-config` (vLLM's KV event publisher) and the addresses coordinators connect to.

vLLM 0.32 binds its PUB socket only for `*`, `::` or ipc:// endpoints (else it connects) and always binds the
replay ROUTER. Locally: ipc:// sockets in the instance's run directory, or in /tmp when that path is too long for a
unix socket (only local processes reach them); on Kubernetes: `tcp://*:<port>`, reached at the pod IP. An
operator's own kv-events-config keeps its endpoint and topic (pyMotor's meaning); motor fills only what is
missing."""

import hashlib
from dataclasses import dataclass
from typing import Any

from motor.config.kv_events import DEFAULT_HASH_ALGORITHM, KV_EVENTS_TOPIC


@dataclass(frozen=True)
class KvEventsPlacement:
    endpoint: str  # what the engine binds
    replay_endpoint: str
    connect: str  # what a coordinator connects to
    replay_connect: str


# sizeof(sockaddr_un.sun_path) on Linux less the terminating NUL: ZMQ refuses longer ipc:// paths
IPC_PATH_MAX_BYTES = 107


def local_placement(run_dir: str) -> KvEventsPlacement:
    """ipc sockets in the instance's run directory; when its path is too long for a unix socket address, in
    /tmp under a name derived from it (one per run directory, so instances and jobs never share one)."""
    base = f"{run_dir}/kv"
    if len(f"{base}.ev".encode()) > IPC_PATH_MAX_BYTES:
        base = f"/tmp/motor-kv-{hashlib.sha256(run_dir.encode()).hexdigest()[:20]}"
    events, replay = f"ipc://{base}.ev", f"ipc://{base}.rp"
    return KvEventsPlacement(events, replay, events, replay)


def pod_placement(host: str, port: int, replay_port: int) -> KvEventsPlacement:
    return KvEventsPlacement(
        f"tcp://*:{port}", f"tcp://*:{replay_port}", f"tcp://{host}:{port}", f"tcp://{host}:{replay_port}"
    )


def with_kv_events(options: dict[str, Any], placement: KvEventsPlacement) -> dict[str, Any]:
    """options with kv-events-config filled (the operator's endpoint and topic kept) and the hash algorithm."""
    configured = dict(options.get("kv-events-config") or {})
    config = {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": placement.endpoint,
        "replay_endpoint": placement.replay_endpoint,
        "topic": KV_EVENTS_TOPIC,
        **configured,
    }
    filled = {**options, "kv-events-config": config}
    filled.setdefault("prefix-caching-hash-algo", DEFAULT_HASH_ALGORITHM)
    return filled
