"""The supervisor ↔ worker channel: typed messages, one JSON line each, decoded by what a side accepts."""

import asyncio
import socket

import pytest
from pydantic import ValidationError

from motor.protocol.instances import Endpoint, Instance
from motor.protocol.workers import TO_SUPERVISOR, TO_WORKER, InstanceSet, InstanceSetAck, WorkerReady
from motor.runtime.channel import decode, encode, open_channel

INSTANCE = Instance(
    id="prefill-0",
    role="prefill",
    engine_id="prefill-0",
    model_name="m",
    endpoints=[Endpoint(host="127.0.0.1", port=8000, status_port=8001)],
)


def test_every_message_survives_encode_and_decode() -> None:
    instance_set = InstanceSet(version=7, instances=[INSTANCE])
    line = encode(instance_set)

    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode(line, TO_WORKER) == instance_set
    assert decode(encode(WorkerReady(callback_port=9100)), TO_SUPERVISOR) == WorkerReady(callback_port=9100)
    assert decode(encode(InstanceSetAck(version=7)), TO_SUPERVISOR) == InstanceSetAck(version=7)


def test_the_type_field_tells_messages_apart_on_the_wire() -> None:
    assert decode(b'{"type": "ack", "version": 3}', TO_SUPERVISOR) == InstanceSetAck(version=3)
    assert decode(b'{"type": "ready", "callback_port": 9}', TO_SUPERVISOR) == WorkerReady(callback_port=9)


@pytest.mark.parametrize(
    "line",
    [
        b'{"type": "instances", "version": 1, "instances": []}',  # a worker never sends this
        b'{"type": "ack"}',
        b'{"type": "ack", "version": 1, "extra": true}',
        b'{"type": "ready", "callback_port": 0}',
        b"not json",
    ],
    ids=lambda line: line.decode()[:30],
)
def test_what_a_side_does_not_accept_is_refused(line: bytes) -> None:
    with pytest.raises(ValidationError):
        decode(line, TO_SUPERVISOR)


async def test_a_socketpair_carries_messages_both_ways_and_reports_the_close() -> None:
    supervisor_end, worker_end = socket.socketpair()
    supervisor = await open_channel(supervisor_end, TO_SUPERVISOR)
    worker = await open_channel(worker_end, TO_WORKER)

    supervisor.send(InstanceSet(version=1, instances=[INSTANCE] * 3))
    await supervisor.drain()
    received = await worker.receive()
    assert received is not None and received.version == 1 and received.instances == [INSTANCE] * 3

    worker.send(WorkerReady(callback_port=9100))
    worker.send(InstanceSetAck(version=1))
    await worker.drain()
    assert await supervisor.receive() == WorkerReady(callback_port=9100)
    assert await supervisor.receive() == InstanceSetAck(version=1)

    worker.close()
    assert await asyncio.wait_for(supervisor.receive(), 5) is None
    supervisor.close()
