"""Small TCP helpers: address parsing, port checks and free local ports (the pool master's launcher, the store
client, tests and benchmarks)."""

import random
import socket
import time
from collections import deque

# Blocks free_port_block handed out in the last HOLD_S seconds in this process, oldest first: a port is free until
# its server binds it, so a later pick could land on one another caller is about to bind (a test's trap listener
# inside a job's plan, say).
HOLD_S = 60.0
_recent_blocks: deque[tuple[float, range]] = deque()


def split_host_port(address: str) -> tuple[str, int]:
    """'127.0.0.1:50088' -> ('127.0.0.1', 50088); raise ValueError naming the expected form otherwise."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"{address!r} is not a host:port address, e.g. '127.0.0.1:50088'")
    return host.strip("[]"), int(port)


def accepts_connections(host: str, port: int, *, timeout_s: float) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def try_bind(host: str, port: int) -> None:
    """Raise the OSError binding host:port would give (a port held only by TIME_WAIT connections binds)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))


def free_local_ports(count: int) -> list[int]:
    """`count` distinct ports the kernel hands out for 127.0.0.1:0 (all held until every one is chosen)."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def free_port_block(count: int) -> int:
    """The first of `count` consecutive ports on 127.0.0.1 that are free now, below Linux's ephemeral range
    (32768+), where outgoing connections could take them before a server binds, and outside the blocks this
    process was handed in the last HOLD_S seconds."""
    now = time.monotonic()
    while _recent_blocks and _recent_blocks[0][0] <= now - HOLD_S:
        _recent_blocks.popleft()
    for _ in range(200):
        base = random.randrange(20000, 32000 - count)
        block = range(base, base + count)
        if any(block.start < held.stop and held.start < block.stop for _, held in _recent_blocks):
            continue
        sockets: list[socket.socket] = []
        try:
            for port in block:
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
            _recent_blocks.append((now, block))
            return base
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise RuntimeError(f"no block of {count} free consecutive ports found below 32000")
