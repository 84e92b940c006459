"""Probes the local backend makes: is a port taken, what does a URL answer."""

import socket
import urllib.error
import urllib.request


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        # as servers do: connections in TIME_WAIT from an earlier run do not block the port
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def http_status(url: str, timeout: float = 2.0) -> tuple[int, bytes] | None:
    """(status, body) of a GET, or None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None
