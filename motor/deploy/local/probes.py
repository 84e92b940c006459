"""Probes the local backend makes: is a port taken, what does a URL answer (over TLS with the client
settings of the management channel when the URL is https)."""

import socket
from collections.abc import Mapping

from motor.protocol.specs import TlsFiles
from motor.runtime.probe import fetch
from motor.runtime.tls import client_context


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        # as servers do: connections in TIME_WAIT from an earlier run do not block the port
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def http_status(
    url: str,
    timeout: float = 2.0,
    *,
    tls: TlsFiles | None = None,
    headers: Mapping[str, str] | None = None,
) -> tuple[int, bytes] | None:
    """(status, body) of a GET, or None when nothing answers."""
    context = client_context(tls) if url.startswith("https:") else None
    return fetch(url, timeout=timeout, context=context, headers=headers)
