"""Listening sockets a process inherits from the one that started it, so that a port outlives the processes
serving it: connections that arrive while no process accepts (a restart, a standby's takeover) wait in the
socket's backlog instead of being refused.

The parent binds and listens, passes the descriptor (`pass_fds`) and names it in `MOTOR_LISTEN_FDS`
(`name=fd,name=fd`); the child takes it with `inherited(name)`.
"""

import os
import socket
from collections.abc import Mapping

LISTEN_FDS_VAR = "MOTOR_LISTEN_FDS"
BACKLOG = 4096  # the kernel caps it at net.core.somaxconn


def held_listener(host: str, port: int) -> socket.socket:
    """A listening socket on host:port, inheritable (for `pass_fds`)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.set_inheritable(True)
    return sock


class HeldListeners:
    """The listening sockets a supervisor holds for its children, one per address (a standby pair shares its
    leader's), from the first child that needs it until `close`."""

    def __init__(self) -> None:
        self._by_address: dict[str, socket.socket] = {}

    def get(self, address: str) -> socket.socket:
        """The socket listening on `address` ("host:port", "[v6]:port"), made on first use."""
        sock = self._by_address.get(address)
        if sock is None:
            host, _, port = address.rpartition(":")
            sock = self._by_address[address] = held_listener(host.strip("[]"), int(port))
        return sock

    def close(self) -> None:
        for sock in self._by_address.values():
            sock.close()
        self._by_address.clear()


def listen_fds_value(fds: Mapping[str, int]) -> str:
    return ",".join(f"{name}={fd}" for name, fd in fds.items())


def inherited(name: str, environ: Mapping[str, str] | None = None) -> socket.socket | None:
    """The listening socket named `name` this process inherited, or None."""
    value = (os.environ if environ is None else environ).get(LISTEN_FDS_VAR, "")
    for entry in value.split(","):
        key, _, fd = entry.partition("=")
        if key == name and fd.isdigit():
            sock = socket.socket(fileno=int(fd))
            sock.setblocking(False)
            return sock
    return None
