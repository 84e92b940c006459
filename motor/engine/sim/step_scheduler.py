"""The capacity model's scheduler: continuous batching in steps over a KV-block budget. Pure: the caller passes
the time (`plan(now)`), so tests drive it with a fake clock; `step_loop.StepLoop` drives it in real time.

Each step, in this order (vLLM's order):
1. sequences whose KV transfer finished join the running set;
2. running sequences, oldest first, take one token of the step's budget each if they decode (growing their KV
   by a block when the next token starts one; when no block is free the youngest running sequence is
   preempted: its blocks are freed and it waits at the head of the queue to recompute) or a chunk of their
   remaining prompt if they prefill (chunked prefill);
3. waiting sequences, first come first served, are admitted while the token budget lasts, fewer than
   max_num_seqs are admitted and their blocks fit (the head waits for blocks: no overtaking). A sequence with
   KV to receive (pool hit or remote prefill) first waits for the engine's link, outside the compute.

A sequence that finishes its prompt in a step emits its first token at the end of that step; a decoding one
emits one token per step.
"""

import enum
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from motor.engine.sim.capacity import CapacityModel, blocks_for
from motor.engine.sim.kv_budget import BlockHolding, KvBlockBudget


class SeqState(enum.Enum):
    WAITING = "waiting"
    LOADING = "loading"  # admitted, its KV is on the link
    PREFILL = "prefill"
    DECODE = "decode"
    FINISHED = "finished"


def _ignore_failure(_exc: BaseException) -> None:
    return None


@dataclass(eq=False)
class ScheduledSequence:
    """A request as the scheduler sees it. `on_token()` emits the next output token and returns True when the
    sequence is done (EOS or max_tokens); `on_failure` is told when the scheduler itself fails."""

    on_token: Callable[[], bool]
    prompt_tokens: int
    max_tokens: int
    cached_tokens: int = 0  # prompt tokens whose KV the engine has without computing them
    transfer_tokens: int = 0  # of those, the ones that arrive over the link (pool or remote prefill)
    shared_blocks: tuple[
        bytes, ...
    ] = ()  # hashes of the prompt's shareable blocks (empty: no prefix caching)
    on_failure: Callable[[BaseException], None] = _ignore_failure
    state: SeqState = field(default=SeqState.WAITING, init=False)
    generated: int = field(default=0, init=False)
    remaining_prefill: int = field(default=0, init=False)
    ready_at: float = field(default=0.0, init=False)
    transferred: bool = field(default=False, init=False)
    preemptions: int = field(default=0, init=False)
    blocks: BlockHolding = field(default_factory=BlockHolding, init=False)


@dataclass(frozen=True)
class Step:
    prefill: list[tuple[ScheduledSequence, int]]  # (sequence, prompt tokens computed in this step)
    decode: list[ScheduledSequence]
    seconds: float


class StepScheduler:
    def __init__(self, model: CapacityModel, *, num_blocks: int, block_size: int, max_num_seqs: int) -> None:
        self._model = model
        self._block_size = block_size
        self._max_num_seqs = max_num_seqs
        self._budget = KvBlockBudget(num_blocks)
        self._waiting: deque[ScheduledSequence] = deque()
        self._loading: list[ScheduledSequence] = []
        self._running: dict[ScheduledSequence, None] = {}  # admission order: the last one is the youngest
        self._link_free_at = 0.0
        self.preemptions = 0

    # ---- state, as the metrics show it -----------------------------------------------------------------------

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        """Waiting for admission or for their KV to arrive (vLLM counts both as waiting)."""
        return len(self._waiting) + len(self._loading)

    def kv_usage(self) -> float:
        return self._budget.usage()

    @property
    def used_blocks(self) -> int:
        return self._budget.used

    def queued_prefill_tokens(self) -> int:
        """Prompt tokens still to compute: waiting, loading and partly prefilled sequences."""
        queued = sum(seq.remaining_prefill for seq in self._waiting)
        queued += sum(seq.remaining_prefill for seq in self._loading)
        return queued + sum(seq.remaining_prefill for seq in self._running if seq.state is SeqState.PREFILL)

    def next_ready_at(self) -> float | None:
        """When the next KV transfer ends (the scheduler has work then even if nothing else arrives)."""
        return min((seq.ready_at for seq in self._loading), default=None)

    # ---- requests ------------------------------------------------------------------------------------------

    def submit(self, seq: ScheduledSequence) -> None:
        """Queue a sequence; ValueError when it could never fit in the KV budget."""
        needed = blocks_for(seq.prompt_tokens + seq.max_tokens, self._block_size)
        if needed > self._budget.num_blocks:
            raise ValueError(
                f"the request needs {needed} KV blocks for its prompt and max_tokens; the engine has "
                f"{self._budget.num_blocks} (--num-gpu-blocks-override)"
            )
        seq.state = SeqState.WAITING
        seq.remaining_prefill = max(seq.prompt_tokens - seq.cached_tokens, 1)
        seq.blocks = BlockHolding(shared=seq.shared_blocks)
        self._waiting.append(seq)

    def abort(self, seq: ScheduledSequence) -> None:
        """Drop a sequence wherever it is and free its blocks (no-op once it finished)."""
        if seq.state is SeqState.WAITING:
            self._waiting.remove(seq)
        elif seq.state is SeqState.LOADING:
            self._loading.remove(seq)
        elif seq.state is not SeqState.FINISHED:
            del self._running[seq]
        else:
            return
        self._finish(seq)

    def abandon_all(self) -> list[ScheduledSequence]:
        """Drop every sequence (the scheduler failed); returns them so the caller can tell each one."""
        dropped = [*self._waiting, *self._loading, *self._running]
        self._waiting.clear()
        self._loading.clear()
        self._running.clear()
        for seq in dropped:
            self._finish(seq)
        return dropped

    # ---- steps ---------------------------------------------------------------------------------------------

    def plan(self, now: float, *, slowdown: float = 1.0) -> Step | None:
        """The next step at time `now`, or None when there is nothing to compute."""
        self._admit_transferred(now)
        budget = self._model.max_num_batched_tokens
        prefill: list[tuple[ScheduledSequence, int]] = []
        decode: list[ScheduledSequence] = []
        for seq in list(self._running):
            if budget <= 0:
                break
            if seq.state is SeqState.PREFILL:
                chunk = min(seq.remaining_prefill, budget)
                prefill.append((seq, chunk))
                budget -= chunk
            elif seq.state is SeqState.DECODE and self._make_room_to_decode(seq):
                decode.append(seq)
                budget -= 1
        budget = self._admit_waiting(now, budget, prefill, slowdown)
        if not prefill and not decode:
            return None
        seconds = self._model.step_seconds(
            prefill_tokens=sum(chunk for _, chunk in prefill),
            decode_seqs=len(decode),
            context_tokens=sum(seq.prompt_tokens + seq.generated for seq in decode),
        )
        return Step(prefill=prefill, decode=decode, seconds=seconds * slowdown)

    def complete(self, step: Step) -> None:
        """The step's compute is done: advance its sequences and emit their tokens."""
        for seq, chunk in step.prefill:
            if seq.state is SeqState.PREFILL:
                seq.remaining_prefill -= chunk
                if seq.remaining_prefill <= 0:
                    seq.state = SeqState.DECODE
                    self._emit(seq)
        for seq in step.decode:
            if seq.state is SeqState.DECODE:
                self._emit(seq)

    def _emit(self, seq: ScheduledSequence) -> None:
        seq.generated += 1
        if seq.on_token():
            del self._running[seq]
            self._finish(seq)

    def _finish(self, seq: ScheduledSequence) -> None:
        self._budget.release(seq.blocks)
        seq.state = SeqState.FINISHED

    def _admit_transferred(self, now: float) -> None:
        if not self._loading:
            return
        still_loading = []
        for seq in self._loading:
            if seq.ready_at <= now:
                seq.state = SeqState.PREFILL
                self._running[seq] = None
            else:
                still_loading.append(seq)
        self._loading = still_loading

    def _make_room_to_decode(self, seq: ScheduledSequence) -> bool:
        """Give `seq` the blocks its next token needs, preempting the youngest running sequences if allowed;
        False when it cannot decode in this step (it was preempted itself, or no block is free)."""
        needed = blocks_for(seq.prompt_tokens + seq.generated + 1, self._block_size)
        if needed <= seq.blocks.total:
            return True
        while not self._budget.grow_to(seq.blocks, needed):
            if not self._model.preemption:
                return False
            victim = next(reversed(self._running))
            self._preempt(victim)
            if victim is seq:
                return False
        return True

    def _preempt(self, seq: ScheduledSequence) -> None:
        """Recompute-style preemption: free its blocks; it recomputes its prompt and output when readmitted (the
        prompt's shareable blocks from the prefix cache once its prefill completed)."""
        del self._running[seq]
        self._budget.release(seq.blocks)
        if seq.generated:
            reusable = len(seq.shared_blocks) * self._block_size
            seq.remaining_prefill = max(seq.prompt_tokens + seq.generated - reusable, 1)
        else:
            seq.remaining_prefill = max(seq.prompt_tokens - seq.cached_tokens, 1)
        seq.state = SeqState.WAITING
        seq.preemptions += 1
        self.preemptions += 1
        self._waiting.appendleft(seq)

    def _admission_blocks(self, seq: ScheduledSequence) -> int:
        """Blocks to admit with: the KV so far and the next token's slot; all of max_tokens without preemption
        (a sequence that can never be preempted must never run out)."""
        if self._model.preemption:
            return blocks_for(seq.prompt_tokens + seq.generated + 1, self._block_size)
        return blocks_for(seq.prompt_tokens + seq.max_tokens, self._block_size)

    def _admit_waiting(
        self, now: float, budget: int, prefill: list[tuple[ScheduledSequence, int]], slowdown: float
    ) -> int:
        while self._waiting and budget > 0 and len(self._running) + len(self._loading) < self._max_num_seqs:
            seq = self._waiting[0]
            if not self._budget.grow_to(seq.blocks, self._admission_blocks(seq)):
                break
            self._waiting.popleft()
            if seq.transfer_tokens > 0 and not seq.transferred:
                seq.transferred = True
                seq.ready_at = self._reserve_link(now, seq.transfer_tokens, slowdown)
                if seq.ready_at > now:
                    seq.state = SeqState.LOADING
                    self._loading.append(seq)
                    continue
            seq.state = SeqState.PREFILL
            self._running[seq] = None
            chunk = min(seq.remaining_prefill, budget)
            prefill.append((seq, chunk))
            budget -= chunk
        return budget

    def _reserve_link(self, now: float, tokens: int, slowdown: float) -> float:
        """Transfers share the engine's link one after another; returns when this one's KV has arrived."""
        start = max(now, self._link_free_at)
        self._link_free_at = start + self._model.link_seconds(tokens) * slowdown
        return start + self._model.transfer_seconds(tokens) * slowdown
