"""Listening sockets held by a supervisor for its children: one per address, connections wait in the backlog
while no process accepts, and a child finds its socket by name."""

import os
import socket
import subprocess
import sys

from motor.runtime.listeners import LISTEN_FDS_VAR, HeldListeners, inherited, listen_fds_value


def test_one_socket_per_address_and_connections_wait_while_nobody_accepts() -> None:
    held = HeldListeners()
    try:
        first = held.get("127.0.0.1:0")
        assert held.get("127.0.0.1:0") is first, "a standby pair shares its leader's socket"
        port = first.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=2) as client:
            client.sendall(b"GET / HTTP/1.1\r\n\r\n")  # queued: nobody accepted yet
            accepted, _ = first.accept()
            with accepted:
                assert accepted.recv(64).startswith(b"GET / ")
    finally:
        held.close()


def test_a_child_takes_its_socket_by_name() -> None:
    held = HeldListeners()
    try:
        sock = held.get("127.0.0.1:0")
        port = sock.getsockname()[1]
        fd = sock.fileno()
        child = subprocess.run(
            [
                sys.executable,
                "-c",
                "from motor.runtime.listeners import inherited; s = inherited('infer'); "
                "print(s.getsockname()[1], inherited('other'))",
            ],
            env={**os.environ, LISTEN_FDS_VAR: listen_fds_value({"infer": fd})},
            pass_fds=[fd],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert child.returncode == 0, child.stderr
        assert child.stdout.split() == [str(port), "None"]
    finally:
        held.close()
    assert inherited("infer", environ={}) is None
