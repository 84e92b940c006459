"""The capacity model's step scheduler on a fake clock: prefill queueing, chunked prefill, decode steps, the KV
block budget with and without preemption, the KV link."""

from dataclasses import dataclass, field, replace

import pytest

from motor.engine.sim.capacity import CapacityModel
from motor.engine.sim.step_scheduler import ScheduledSequence, SeqState, StepScheduler

FREE = CapacityModel.free()


@dataclass
class Clock:
    now: float = 0.0


@dataclass(eq=False)
class Request:
    """A sequence under test: records when each of its tokens came out."""

    clock: Clock
    max_tokens: int
    token_times: list[float] = field(default_factory=list)

    def on_token(self) -> bool:
        self.token_times.append(self.clock.now)
        return len(self.token_times) == self.max_tokens


class Harness:
    def __init__(
        self, model: CapacityModel, *, num_blocks: int = 1000, block_size: int = 16, max_num_seqs: int = 64
    ):
        self.clock = Clock()
        self.scheduler = StepScheduler(
            model, num_blocks=num_blocks, block_size=block_size, max_num_seqs=max_num_seqs
        )
        self.steps = 0

    def submit(self, prompt: int, max_tokens: int, **fields: object) -> tuple[ScheduledSequence, Request]:
        request = Request(self.clock, max_tokens)
        seq = ScheduledSequence(request.on_token, prompt_tokens=prompt, max_tokens=max_tokens, **fields)  # type: ignore[arg-type]
        self.scheduler.submit(seq)
        return seq, request

    def step(self) -> bool:
        """Run one step (or jump to the next transfer's end); False when there is nothing left to do."""
        step = self.scheduler.plan(self.clock.now)
        if step is None:
            ready_at = self.scheduler.next_ready_at()
            if ready_at is None:
                return False
            self.clock.now = ready_at
            return True
        self.clock.now += step.seconds
        self.scheduler.complete(step)
        self.steps += 1
        return True

    def run(self, max_steps: int = 100_000) -> None:
        for _ in range(max_steps):
            if not self.step():
                return
        raise AssertionError("the scheduler did not go idle")


def test_prompts_queue_behind_each_other_for_the_engine_compute() -> None:
    harness = Harness(
        CapacityModel(
            enabled=True, prefill_tokens_per_s=1000, step_overhead_ms=0, max_num_batched_tokens=1000
        )
    )
    _, first = harness.submit(1000, 1)
    _, second = harness.submit(1000, 1)
    assert harness.scheduler.queued_prefill_tokens() == 2000 and harness.scheduler.num_waiting == 2
    harness.step()
    assert first.token_times == [pytest.approx(1.0)] and second.token_times == []
    assert harness.scheduler.queued_prefill_tokens() == 1000
    harness.run()
    assert second.token_times == [pytest.approx(2.0)]
    assert harness.scheduler.queued_prefill_tokens() == 0 and harness.scheduler.used_blocks == 0


def test_cached_prompt_tokens_cost_no_prefill_but_the_last_token_is_computed() -> None:
    harness = Harness(CapacityModel(enabled=True, prefill_tokens_per_s=1000, step_overhead_ms=0))
    _, cached = harness.submit(1000, 1, cached_tokens=1000)
    _, half = harness.submit(1000, 1, cached_tokens=500)
    assert harness.scheduler.queued_prefill_tokens() == 1 + 500
    harness.run()
    # one step computes both prompts' missing tokens together
    assert cached.token_times == half.token_times == [pytest.approx(0.501)]


def test_chunked_prefill_interleaves_with_decode_steps() -> None:
    model = CapacityModel(
        enabled=True,
        prefill_tokens_per_s=10_000,
        max_num_batched_tokens=1001,
        step_overhead_ms=10,
        decode_ms_per_seq=0,
        decode_ms_per_1k_context=0,
    )
    harness = Harness(model)
    _, decoding = harness.submit(10, 100)
    harness.step()  # the short prompt's prefill: 10 ms + 1 ms
    assert decoding.token_times == [pytest.approx(0.011)]
    long_seq, long_request = harness.submit(3000, 1)
    plans = []
    while long_request.token_times == []:
        step = harness.scheduler.plan(harness.clock.now)
        assert step is not None
        plans.append(([chunk for _, chunk in step.prefill], len(step.decode)))
        harness.clock.now += step.seconds
        harness.scheduler.complete(step)
    # every step decodes the running sequence and gives the rest of the budget to the long prompt
    assert plans == [([1000], 1), ([1000], 1), ([1000], 1)]
    assert len(decoding.token_times) == 4
    gaps = [b - a for a, b in zip(decoding.token_times, decoding.token_times[1:], strict=False)]
    assert gaps == [pytest.approx(0.010 + 0.1)] * 3  # each decode step carries a 1000-token chunk
    assert long_seq.state is SeqState.FINISHED


def test_decode_step_time_grows_with_batch_and_context() -> None:
    model = CapacityModel(
        enabled=True,
        prefill_tokens_per_s=0,
        max_num_batched_tokens=10_000,
        step_overhead_ms=5,
        decode_ms_per_seq=0.5,
        decode_ms_per_1k_context=2,
    )
    harness = Harness(model)
    for _ in range(4):
        harness.submit(1000, 10)
    harness.step()  # all four prompts in one step (prefill costs no time here): 5 ms
    assert harness.clock.now == pytest.approx(0.005)
    step = harness.scheduler.plan(harness.clock.now)
    assert step is not None and len(step.decode) == 4 and not step.prefill
    context = 4 * (1000 + 1)
    assert step.seconds == pytest.approx((5 + 0.5 * 4 + 2 * context / 1000) / 1000)
    assert model.step_seconds(prefill_tokens=0, decode_seqs=1, context_tokens=1001) < step.seconds


def test_every_running_sequence_advances_one_token_per_step() -> None:
    harness = Harness(FREE)
    requests = [harness.submit(20, n)[1] for n in (3, 5, 1)]
    harness.run()
    assert [len(request.token_times) for request in requests] == [3, 5, 1]
    assert harness.steps == 5  # one prefill step emitting three first tokens, then one token per step


def test_a_full_kv_budget_queues_new_requests_until_blocks_free() -> None:
    # 8 blocks of 16 tokens; without preemption a request reserves prompt + max_tokens = 64 tokens = 4 blocks
    harness = Harness(replace(FREE, preemption=False), num_blocks=8)
    first = [harness.submit(48, 16) for _ in range(2)]
    _, third = harness.submit(48, 16)
    harness.step()
    assert harness.scheduler.num_running == 2 and harness.scheduler.num_waiting == 1
    assert harness.scheduler.kv_usage() == 1.0
    for _ in range(15):
        harness.step()
        assert harness.scheduler.num_waiting == 1 and third.token_times == []
    harness.run()
    assert all(len(request.token_times) == 16 for _, request in first) and len(third.token_times) == 16
    assert harness.scheduler.preemptions == 0 and harness.scheduler.used_blocks == 0


def test_preemption_frees_the_youngest_and_it_recomputes_later() -> None:
    model = replace(FREE, preemption=True)
    harness = Harness(model, num_blocks=6, block_size=16)
    older, older_request = harness.submit(30, 40, shared_blocks=(b"a",))
    younger, younger_request = harness.submit(30, 40, shared_blocks=(b"b",))
    harness.step()  # both admitted with 2 blocks each (31 tokens), first tokens out
    assert harness.scheduler.used_blocks == 4
    while harness.scheduler.preemptions == 0:
        harness.step()
    assert younger.state is SeqState.WAITING and younger.preemptions == 1
    assert older.state is SeqState.DECODE
    # it recomputes its prompt and output, less the prompt blocks the prefix cache keeps
    assert younger.remaining_prefill == 30 + younger.generated - 16
    harness.run()
    assert len(older_request.token_times) == len(younger_request.token_times) == 40
    assert harness.scheduler.used_blocks == 0 and harness.scheduler.num_running == 0


def test_a_sequence_that_cannot_grow_preempts_itself_when_it_is_the_youngest() -> None:
    # 5 blocks of 4: both admitted with 2; the older takes the last free block, the younger has none left
    harness = Harness(replace(FREE, preemption=True), num_blocks=5, block_size=4)
    older, older_request = harness.submit(4, 8)
    younger, younger_request = harness.submit(4, 8)
    harness.run()
    assert (older.preemptions, younger.preemptions) == (0, 1)
    assert len(older_request.token_times) == len(younger_request.token_times) == 8


def test_sequences_sharing_a_prefix_hold_its_blocks_once() -> None:
    harness = Harness(FREE, num_blocks=100)
    shared = (b"h1", b"h2", b"h3")
    harness.submit(64, 4, shared_blocks=shared)
    harness.submit(64, 4, shared_blocks=shared)
    harness.step()
    # 65 tokens = 5 blocks each: 3 shared once + 2 private each
    assert harness.scheduler.used_blocks == 3 + 2 * 2


def test_kv_transfers_wait_for_the_link_outside_the_compute() -> None:
    model = CapacityModel(
        enabled=True,
        prefill_tokens_per_s=0,
        step_overhead_ms=1,
        kv_link_gb_per_s=1,
        kv_transfer_latency_ms=2,
        kv_transfer_bytes_per_token=1_000_000,  # 1 ms per token on a 1 GB/s link
    )
    harness = Harness(model)
    fetched, fetched_request = harness.submit(101, 1, cached_tokens=100, transfer_tokens=100)
    queued, queued_request = harness.submit(101, 1, cached_tokens=100, transfer_tokens=100)
    local, local_request = harness.submit(101, 1)
    assert model.transfer_seconds(100) == pytest.approx(0.102)
    step = harness.scheduler.plan(0.0)
    assert step is not None and [seq for seq, _ in step.prefill] == [local]
    assert fetched.state is queued.state is SeqState.LOADING
    assert harness.scheduler.num_waiting == 2 and harness.scheduler.num_running == 1
    # the second transfer queues behind the first on the link; the latency is not serialised
    assert fetched.ready_at == pytest.approx(0.102) and queued.ready_at == pytest.approx(0.202)
    harness.clock.now += step.seconds
    harness.scheduler.complete(step)
    assert local_request.token_times == [pytest.approx(0.001)]
    harness.run()
    assert fetched_request.token_times == [pytest.approx(0.103)]
    assert queued_request.token_times == [pytest.approx(0.203)]


def test_a_preempted_sequence_does_not_pay_its_transfer_again() -> None:
    model = replace(FREE, step_overhead_ms=1, kv_transfer_latency_ms=50, preemption=True)
    harness = Harness(model, num_blocks=5, block_size=4)
    older, _ = harness.submit(5, 8, cached_tokens=4, transfer_tokens=4)
    younger, younger_request = harness.submit(5, 8, cached_tokens=4, transfer_tokens=4)
    harness.run()
    assert younger.preemptions == 1 and len(younger_request.token_times) == 8
    assert older.state is younger.state is SeqState.FINISHED
    # both transfers end at 50 ms; the younger one's recompute after its preemption is not another transfer
    assert harness.clock.now < 2 * model.transfer_seconds(4)


def test_max_num_seqs_caps_the_admitted_sequences() -> None:
    harness = Harness(FREE, max_num_seqs=2)
    for _ in range(3):
        harness.submit(10, 5)
    harness.step()
    assert (harness.scheduler.num_running, harness.scheduler.num_waiting) == (2, 1)


def test_the_token_budget_limits_a_step() -> None:
    harness = Harness(replace(FREE, max_num_batched_tokens=2))
    for _ in range(3):
        harness.submit(1, 5)
    step = harness.scheduler.plan(0.0)
    assert step is not None and len(step.prefill) == 2
    harness.scheduler.complete(step)
    step = harness.scheduler.plan(0.0)
    assert step is not None and len(step.decode) == 2 and not step.prefill


def test_abort_frees_blocks_wherever_the_sequence_is() -> None:
    model = replace(FREE, kv_transfer_latency_ms=10)
    harness = Harness(model, num_blocks=10)
    running, _ = harness.submit(30, 50)
    loading, _ = harness.submit(30, 50, cached_tokens=16, transfer_tokens=16)
    harness.step()
    waiting, _ = harness.submit(30, 50)
    assert (running.state, loading.state, waiting.state) == (
        SeqState.DECODE,
        SeqState.LOADING,
        SeqState.WAITING,
    )
    for seq in (running, loading, waiting):
        harness.scheduler.abort(seq)
        assert seq.state is SeqState.FINISHED
    harness.scheduler.abort(running)  # twice is harmless
    assert harness.scheduler.used_blocks == 0
    assert (harness.scheduler.num_running, harness.scheduler.num_waiting) == (0, 0)
    assert harness.scheduler.plan(harness.clock.now) is None


def test_a_request_larger_than_the_whole_budget_is_refused() -> None:
    harness = Harness(FREE, num_blocks=4, block_size=16)
    with pytest.raises(ValueError, match="needs 5 KV blocks"):
        harness.submit(60, 10)
    harness.submit(54, 10)  # 64 tokens: exactly 4 blocks


def test_abandon_all_returns_every_sequence_and_frees_everything() -> None:
    harness = Harness(FREE, max_num_seqs=1)
    first, _ = harness.submit(10, 5)
    harness.step()
    second, _ = harness.submit(10, 5)
    assert set(harness.scheduler.abandon_all()) == {first, second}
    assert harness.scheduler.used_blocks == 0 and harness.scheduler.num_waiting == 0
