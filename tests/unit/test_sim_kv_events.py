"""The simulator's KV event publisher: what its prefix cache gains and loses reaches a subscriber as vLLM's
events with vLLM's block hashes, lost batches come back through the replay socket, and the flags are vLLM's."""

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import zmq
import zmq.asyncio

from motor.engine.sim.cli import parse_config
from motor.engine.sim.config import KvEventsConfig, SimConfig
from motor.engine.sim.engine import GenerationRequest, Sequence, SimEngine
from motor.engine.sim.faults import FaultInjector
from motor.engine.sim.kv_events import KvEventPublisher, PrefixCacheEvents
from motor.engine.sim.metrics import EngineMetrics
from motor.kv.block_hashes import BlockHasher
from motor.kv.events import BlockRemoved, BlockStored, EventBatch, decode_message, replay_request
from motor.kv.index import KvIndex, Outcome

BLOCK = 16
RECEIVE_TIMEOUT_S = 5.0


def events_config(tmp_path: Path) -> KvEventsConfig:
    return KvEventsConfig(
        enable_kv_cache_events=True,
        endpoint=f"ipc://{tmp_path}/kv.ev",
        replay_endpoint=f"ipc://{tmp_path}/kv.rp",
        topic="kv-events",
    )


class Cluster:
    """One simulated engine publishing, and a SUB socket reading it."""

    def __init__(self, tmp_path: Path, num_kv_blocks: int) -> None:
        self.config = events_config(tmp_path)
        self.hasher = BlockHasher(BLOCK, "sha256", "0")
        sim = SimConfig(served_model_names=("sim-model",), block_size=BLOCK, num_kv_blocks=num_kv_blocks)
        faults = FaultInjector(sim.faults, seed=0, on_crash=lambda _completed: None)
        events = PrefixCacheEvents(KvEventPublisher(self.config), self.hasher)
        self.engine = SimEngine(sim, pool=None, faults=faults, metrics=EngineMetrics(), kv_events=events)
        self.engine.start()
        self.context = zmq.asyncio.Context()
        self.sub = self.context.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub.connect(self.config.endpoint)

    async def generate(self, prompt: list[int]) -> None:
        seq = Sequence(GenerationRequest(request_id="r", prompt_token_ids=prompt, max_tokens=2))
        async for _ in self.engine.generate(seq):
            pass

    async def receive(self) -> EventBatch:
        assert await self.sub.poll(RECEIVE_TIMEOUT_S * 1000), "no KV event batch arrived"
        frames = await self.sub.recv_multipart()
        assert frames[0] == b"kv-events"
        batch = decode_message(frames)
        assert batch is not None
        return batch

    async def replay(self, start: int) -> list[int]:
        """The sequences the engine's replay socket sends from `start`, up to its end marker."""
        dealer = self.context.socket(zmq.DEALER)
        dealer.connect(self.config.replay_endpoint)
        try:
            await dealer.send_multipart([b"", replay_request(start)])
            replayed = []
            while True:
                assert await dealer.poll(RECEIVE_TIMEOUT_S * 1000), "the replay did not end"
                message = decode_message((await dealer.recv_multipart())[1:])
                if message is None:
                    return replayed
                replayed.append(message.sequence)
        finally:
            dealer.close(linger=0)

    async def connected(self) -> None:
        """A SUB socket misses what is published before its subscription reaches the publisher: publish
        throwaway prompts until one arrives (the index starts from the first batch it sees)."""
        for attempt in range(100):
            await self.generate([7, attempt, *range(BLOCK)])
            if await self.sub.poll(50):
                await self.sub.recv_multipart()
                while await self.sub.poll(200):
                    await self.sub.recv_multipart()
                return
        pytest.fail("the subscriber never connected")

    async def close(self) -> None:
        self.sub.close(linger=0)
        self.context.term()
        await self.engine.close()


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    running = Cluster(tmp_path, num_kv_blocks=8)
    await running.connected()
    yield running
    await running.close()


async def test_stored_blocks_carry_vllms_hashes_and_fill_the_index(cluster: Cluster) -> None:
    prompt = list(range(100, 100 + 3 * BLOCK + 5))  # three shareable blocks
    await cluster.generate(prompt)
    batch = await cluster.receive()
    (stored,) = batch.events
    assert isinstance(stored, BlockStored) and stored.block_size == BLOCK and stored.medium == "GPU"
    assert stored.block_hashes == cluster.hasher.event_hashes(prompt)
    index = KvIndex(BLOCK)
    assert index.apply("p0", batch) is Outcome.APPLIED
    assert index.longest_prefixes(cluster.hasher.event_hashes(prompt)) == {"p0": 3}

    # The same prompt again is a cache hit: nothing new to publish, so the next batch is the next prompt's,
    # which shares two blocks and stores only its own third one.
    await cluster.generate(prompt)
    other = [*prompt[: 2 * BLOCK], *range(900, 900 + BLOCK + 1)]
    await cluster.generate(other)
    (stored,) = (await cluster.receive()).events
    assert isinstance(stored, BlockStored)
    assert stored.block_hashes == cluster.hasher.event_hashes(other)[2:]


async def test_evictions_are_published_as_removed_blocks(cluster: Cluster) -> None:
    first = list(range(100, 100 + 6 * BLOCK + 1))
    second = list(range(300, 300 + 6 * BLOCK + 1))  # 12 blocks in a cache of 8: 4 of `first` go
    await cluster.generate(first)
    await cluster.receive()
    await cluster.generate(second)
    events = (await cluster.receive()).events
    assert [type(event) for event in events] == [BlockStored, BlockRemoved]
    first_hashes = cluster.hasher.event_hashes(first)
    # The oldest blocks go first: the connection probes' (still cached), then `first`'s leading four.
    removed = [h for h in events[1].block_hashes if h in first_hashes]
    assert removed == first_hashes[:4]
    assert not set(events[1].block_hashes) & set(cluster.hasher.event_hashes(second))


async def test_the_replay_socket_answers_from_the_asked_sequence(cluster: Cluster) -> None:
    for offset in range(3):
        await cluster.generate(list(range(1000 * (offset + 1), 1000 * (offset + 1) + BLOCK + 1)))
    sequences = [(await cluster.receive()).sequence for _ in range(3)]
    assert await cluster.replay(sequences[1]) == sequences[1:]


async def test_an_engine_that_published_nothing_yet_answers_a_replay_at_once(tmp_path: Path) -> None:
    # a subscriber asks for a replay as soon as it connects, usually before the engine's first batch
    fresh = Cluster(tmp_path, num_kv_blocks=8)
    try:
        assert await fresh.replay(0) == []
    finally:
        await fresh.close()


def test_flags_are_vllms_and_unknown_keys_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    config = parse_config(
        [
            "--kv-events-config",
            '{"enable_kv_cache_events": true, "endpoint": "tcp://*:6000"}',
            "--virtual-engines",
            "2",
        ],
        environ={},
    )
    assert config.kv_events is not None and config.kv_events.publishes
    assert config.hash_seed == "vllm-none-hash" and config.prefix_caching_hash_algo == "sha256"
    assert config.virtual_engine(1, 9001).kv_events.endpoint == "tcp://*:6001"  # type: ignore[union-attr]
    assert not KvEventsConfig(endpoint="ipc:///x").publishes
    assert KvEventsConfig(endpoint="ipc:///x").for_engine(2).endpoint == "ipc:///x_dp2"
    with pytest.raises(SystemExit) as exited:
        parse_config(["--kv-events-config", '{"enable_kv_cache_events": true, "endpont": "tcp://*:1"}'])
    assert exited.value.code == 2
    assert "--kv-events-config: endpont" in capsys.readouterr().err
