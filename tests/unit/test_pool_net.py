"""free_port_block: blocks of free ports that a later pick in the same process never lands in."""

import socket
from collections import deque

import pytest

from motor.runtime import net
from motor.runtime.net import free_port_block


@pytest.fixture(autouse=True)
def own_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """This module's picks do not crowd the blocks the rest of the suite's process is handed."""
    monkeypatch.setattr(net, "_recent_blocks", deque())


def test_a_block_handed_out_is_not_handed_out_again_before_it_is_bound() -> None:
    """The ports of a job's plan stay free until its components start; a test's next pick (a trap listener, a
    recorder) used to land among them now and then (a CI failure: the trap was a genuine node manager port)."""
    base = free_port_block(24)
    plan = range(base, base + 24)
    picks = {free_port_block(1) for _ in range(3000)}  # 3,000 draws hit 24 of 12,000 ports 6 times on average
    assert not picks & set(plan)


def test_a_block_is_free_to_bind() -> None:
    base = free_port_block(3)
    for port in range(base, base + 3):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_blocks_are_held_back_for_a_while_only(monkeypatch: pytest.MonkeyPatch) -> None:
    base = free_port_block(24)
    now = net.time.monotonic()
    monkeypatch.setattr(net.time, "monotonic", lambda: now + net.HOLD_S + 1)
    free_port_block(1)
    assert all(base not in held for _, held in net._recent_blocks)
