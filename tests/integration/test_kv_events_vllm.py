"""vLLM's own ZMQ KV event publisher (the one its engines run with `--kv-events-config`) on 127.0.0.1, read by
motor's decoder into motor's index: live batches in order, then a lost stretch recovered through the publisher's
replay socket, as the index's subscriber will do."""

import time
from collections.abc import Iterator

import pytest

from motor.kv.block_hashes import BlockHasher
from motor.kv.events import decode_message, replay_request
from motor.kv.index import KvIndex, Outcome
from motor.runtime.net import free_local_ports
from tests.installs import importable, needs_vllm

pytestmark = needs_vllm
if importable("vllm"):
    import zmq  # vLLM's dependency, as its publisher is
    from vllm.distributed import kv_events as vllm_events

BLOCK = 16
RECEIVE_TIMEOUT_MS = 5000


def batch(*events: object) -> object:
    return vllm_events.KVEventBatch(ts=time.time(), events=list(events))


def stored(hashes: list[int]) -> object:
    return vllm_events.BlockStored(
        block_hashes=hashes,
        parent_block_hash=None,
        token_ids=list(range(len(hashes) * BLOCK)),
        block_size=BLOCK,
        lora_id=None,
        medium="GPU",
        lora_name=None,
    )


@pytest.fixture
def publisher() -> Iterator[tuple[object, "zmq.Socket", int]]:
    """vLLM's publisher connecting to a SUB socket bound on 127.0.0.1, and its replay ROUTER's port."""
    pub_port, replay_port = free_local_ports(2)
    context = zmq.Context()
    subscriber = context.socket(zmq.SUB)
    subscriber.bind(f"tcp://127.0.0.1:{pub_port}")
    subscriber.setsockopt(zmq.SUBSCRIBE, b"")
    subscriber.setsockopt(zmq.RCVTIMEO, RECEIVE_TIMEOUT_MS)
    published = vllm_events.ZmqEventPublisher(
        data_parallel_rank=0,
        endpoint=f"tcp://127.0.0.1:{pub_port}",
        replay_endpoint=f"tcp://127.0.0.1:{replay_port}",
    )
    try:
        yield published, subscriber, replay_port
    finally:
        published.shutdown()
        subscriber.close(linger=0)
        context.term()


def test_published_batches_reach_the_index_and_a_gap_is_replayed(
    publisher: tuple[object, "zmq.Socket", int],
) -> None:
    published, subscriber, replay_port = publisher
    hashes = BlockHasher(BLOCK).event_hashes(list(range(10 * BLOCK)))
    # A PUB that connects drops what it sends before the subscription reached it: send a first batch until one
    # arrives (each try is its own sequence number: the index starts at the first it sees).
    first = None
    for _ in range(50):
        published.publish(batch(stored(hashes[:2])))
        try:
            first = decode_message(subscriber.recv_multipart())
            break
        except zmq.Again:
            continue
    assert first is not None
    index = KvIndex(BLOCK)
    assert index.apply("p0", first) is Outcome.APPLIED
    while (pending := subscriber.poll(200)) and pending:  # the tries that arrived late are duplicates or gaps
        late = decode_message(subscriber.recv_multipart())
        assert late is not None
        index.apply("p0", late)
    expected = index.expected_sequence("p0")
    assert expected is not None

    for part in range(2, 10, 2):
        published.publish(batch(stored(hashes[part : part + 2])))
    received = [decode_message(subscriber.recv_multipart()) for _ in range(4)]
    # Lose the first two of them, as a slow subscriber whose queue overflowed would.
    assert index.apply("p0", received[2]) is Outcome.GAP  # type: ignore[arg-type]
    replay = subscriber.context.socket(zmq.DEALER)
    replay.setsockopt(zmq.RCVTIMEO, RECEIVE_TIMEOUT_MS)
    replay.connect(f"tcp://127.0.0.1:{replay_port}")
    try:
        replay.send_multipart([b"", replay_request(expected)])
        outcomes = []
        while True:
            frames = replay.recv_multipart()
            message = decode_message(frames[1:])  # the DEALER sees the ROUTER's empty delimiter first
            if message is None:
                break
            outcomes.append(index.apply("p0", message))
    finally:
        replay.close(linger=0)
    assert Outcome.APPLIED in outcomes
    assert index.longest_prefixes(hashes) == {"p0": 10}
