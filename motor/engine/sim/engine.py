"""The simulated engine: obtains a prompt's KV (local cache, pool, remote prefill), computes the rest, runs the
sequence in a continuous batch and derives its output tokens from the KV it holds.
"""

import asyncio
import functools
import logging
import math
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from motor.engine.sim.config import SimConfig
from motor.engine.sim.errors import SimError
from motor.engine.sim.faults import FaultInjector
from motor.engine.sim.kv_blocks import (
    SequenceContext,
    block_hashes,
    block_key,
    compute_kv,
    kv_digest,
    root_hash,
    transfer_key,
)
from motor.engine.sim.kv_events import PrefixCacheEvents
from motor.engine.sim.kv_pool import KvPool
from motor.engine.sim.latency import LatencyModel
from motor.engine.sim.metrics import EngineMetrics
from motor.engine.sim.prefix_cache import HeldBlock, PrefixCache
from motor.engine.sim.sampling import output_token
from motor.engine.sim.step_loop import StepLoop
from motor.engine.sim.step_scheduler import ScheduledSequence, Step, StepScheduler
from motor.engine.sim.transfer import (
    RemoteKvLocator,
    TransferRequest,
    prefill_result_params,
    transfer_manifest,
)
from motor.tokenize.sim_vocab import EOS_ID

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GenerationRequest:
    request_id: str
    prompt_token_ids: list[int]
    max_tokens: int
    min_tokens: int = 0
    ignore_eos: bool = False
    seed: int = 0
    transfer: TransferRequest | None = None


@dataclass(eq=False)
class Sequence:
    """One request inside the engine; the response is built from it."""

    request: GenerationRequest
    cached_tokens: int = 0
    output_token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    kv_transfer_params: dict[str, Any] | None = None


@dataclass
class _PromptKv:
    """The shareable blocks a sequence holds without computing them, and where they came from."""

    blocks: list[HeldBlock]
    local_hits: int = 0
    in_pool: list[bool] | None = None  # per shareable block, when the pool was asked
    handed_over: bool = False  # the pool blocks are the ones a prefill named in kv_transfer_params


class SimEngine:
    def __init__(
        self,
        config: SimConfig,
        *,
        pool: KvPool | None,
        faults: FaultInjector,
        metrics: EngineMetrics,
        kv_events: PrefixCacheEvents | None = None,
    ) -> None:
        """`kv_events`: where the prefix cache's changes are published (--kv-events-config), if anywhere."""
        self._config = config
        self._kv_events = kv_events
        self._pool = pool
        self._faults = faults
        self._metrics = metrics
        self._locator = RemoteKvLocator(config, pool)
        self._prefix_cache = PrefixCache(config.num_kv_blocks if config.enable_prefix_caching else 0)
        self._root = root_hash(config.model_name, config.block_size, config.kv_bytes_per_token)
        self._slots = asyncio.Semaphore(config.max_batch)
        self._running: set[Sequence] = set()
        self._waiting = 0
        self._prefilling_tokens = 0
        self._steps: StepLoop | None = None
        if config.capacity.enabled:
            scheduler = StepScheduler(
                config.capacity,
                num_blocks=config.num_kv_blocks,
                block_size=config.block_size,
                max_num_seqs=config.max_batch,
            )
            self._steps = StepLoop(scheduler, slowdown=self._slowdown, on_step=self._count_step)

    def _count_step(self, step: Step, seconds: float) -> None:
        """As vLLM counts an engine step: its tokens, and its time once per output token of a running sequence."""
        metrics = self._metrics
        metrics.iteration_tokens.observe(sum(chunk for _, chunk in step.prefill) + len(step.decode))
        if step.decode:
            metrics.inter_token_latency.observe(seconds, count=len(step.decode))

    @property
    def num_running(self) -> int:
        if self._steps is not None:
            return self._steps.scheduler.num_running
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        """Requests not running yet: looking up or waiting for their KV, hung, or queued for admission."""
        if self._steps is not None:
            return self._waiting + self._steps.scheduler.num_waiting
        return self._waiting

    @property
    def num_preemptions(self) -> int:
        return 0 if self._steps is None else self._steps.scheduler.preemptions

    def queued_prefill_tokens(self) -> int:
        """Prompt tokens admitted but not computed yet (with the capacity model: queued behind other prompts)."""
        if self._steps is not None:
            return self._steps.scheduler.queued_prefill_tokens()
        return self._prefilling_tokens

    def kv_cache_usage(self) -> float:
        if self._steps is not None:
            return self._steps.scheduler.kv_usage()
        if self._config.num_kv_blocks <= 0:
            return 0.0
        block_size = self._config.block_size
        used = sum(
            math.ceil((len(seq.request.prompt_token_ids) + len(seq.output_token_ids)) / block_size)
            for seq in self._running
        )
        return min(used / self._config.num_kv_blocks, 1.0)

    async def close(self) -> None:
        if self._steps is not None:
            await self._steps.close()
        await self._locator.close()
        if self._kv_events is not None:
            await self._kv_events.close()

    def start(self) -> None:
        """What runs on the event loop from the start: the KV event replay service."""
        if self._kv_events is not None:
            self._kv_events.start()

    def generate(self, seq: Sequence) -> AsyncIterator[tuple[int, str | None]]:
        """Yield (token id, finish reason or None) per output token. Close the generator to abort."""
        if self._steps is None:
            return self._generate_timed(seq)
        return self._generate_stepped(seq, self._steps)

    async def _prepare(self, seq: Sequence, *, take_slot: bool) -> tuple[list[bytes], _PromptKv]:
        """Everything before compute: the error fault, the hang fault, the prompt's KV (local cache, pool, remote
        prefill) and, for the latency model, a batch slot. The request counts as waiting meanwhile."""
        if self._faults.draw_error():
            self._metrics.injected_errors += 1
            self._metrics.faults_fired["error_rate"] += 1
            self._metrics.finished["error"] += 1
            raise SimError(500, "injected fault: error_rate (the simulator failed this request on purpose)")
        self._waiting += 1
        try:
            if self._faults.faults.hang:
                self._metrics.faults_fired["hang"] += 1
            await self._faults.hold_while_hanging()
            hashes = block_hashes(seq.request.prompt_token_ids, self._config.block_size, self._root)
            prompt_kv = await self._obtain_prompt_kv(seq, hashes)
            if take_slot:
                await self._slots.acquire()
        except BaseException as exc:
            self._record_unfinished(seq, exc)
            raise
        finally:
            self._waiting -= 1
        return hashes, prompt_kv

    async def _generate_timed(self, seq: Sequence) -> AsyncIterator[tuple[int, str | None]]:
        """The latency model: prefill and every inter-token gap are sleeps of their own (no contention)."""
        hashes, prompt_kv = await self._prepare(seq, take_slot=True)
        self._running.add(seq)
        try:
            context = await self._prefill(seq, hashes, prompt_kv)
            async for step in self._decode(seq, context):
                yield step
        except BaseException as exc:
            self._record_unfinished(seq, exc)
            raise
        finally:
            self._running.discard(seq)
            self._slots.release()

    async def _generate_stepped(
        self, seq: Sequence, steps: StepLoop
    ) -> AsyncIterator[tuple[int, str | None]]:
        """The capacity model: the step loop computes the prompt and emits the tokens; this relays them."""
        hashes, prompt_kv = await self._prepare(seq, take_slot=False)
        try:
            context = self._compute_prompt_kv(seq, hashes, prompt_kv, count=False)
            tokens = _SteppedTokens(seq, functools.partial(self._next_token, seq, context))
            job = ScheduledSequence(
                tokens.emit,
                prompt_tokens=len(seq.request.prompt_token_ids),
                max_tokens=seq.request.max_tokens,
                cached_tokens=seq.cached_tokens,
                transfer_tokens=seq.cached_tokens - prompt_kv.local_hits * self._config.block_size,
                shared_blocks=tuple(hashes) if self._config.enable_prefix_caching else (),
                on_failure=tokens.fail,
            )
            try:
                steps.submit(job)
            except ValueError as exc:
                raise SimError(400, str(exc)) from None
            try:
                await tokens.wait_for(1)
                self._count_prompt(seq, prompt_kv)  # as vLLM: once the prompt is computed, not when it queues
                await self._publish_prompt_kv(seq, hashes, prompt_kv)
                sent = 0
                while True:
                    await tokens.wait_for(sent + 1)
                    output = seq.output_token_ids
                    while sent < len(output):
                        token = output[sent]
                        sent += 1
                        finish = seq.finish_reason if sent == len(output) else None
                        yield token, finish
                        if finish is not None:
                            return
            finally:
                steps.abort(job)
        except BaseException as exc:
            self._record_unfinished(seq, exc)
            raise

    def _record_unfinished(self, seq: Sequence, exc: BaseException) -> None:
        """Count a sequence that ends early: an error, or an abort (client gone, generator closed)."""
        if seq.finish_reason is None:
            seq.finish_reason = "error" if isinstance(exc, Exception) else "abort"
            self._metrics.finished[seq.finish_reason] += 1

    async def _obtain_prompt_kv(self, seq: Sequence, hashes: list[bytes]) -> _PromptKv:
        local = self._prefix_cache.longest_prefix(hashes)
        prompt_kv = _PromptKv(blocks=list(local), local_hits=len(local))
        transfer = seq.request.transfer
        remote_keys = None
        if transfer is not None and transfer.remote_prefill:
            remote_keys = await self._locator.block_keys(seq.request.request_id, transfer)
        if self._pool is None:
            if remote_keys:
                log.warning(
                    "request %s: no KV pool configured, recomputing the prompt", seq.request.request_id
                )
            return prompt_kv
        if remote_keys is not None:
            keys = remote_keys[len(local) : len(hashes)]
        else:
            keys = [block_key(self._config.model_name, block_hash) for block_hash in hashes]
            prompt_kv.in_pool = await self._pool.present(keys)
            first_missing = next((i for i, present in enumerate(prompt_kv.in_pool) if not present), len(keys))
            keys = keys[len(local) : max(first_missing, len(local))]
        prompt_kv.handed_over = remote_keys is not None
        for kv in await self._pool.fetch(keys):
            if kv is None or len(kv) != self._config.block_bytes:
                break
            prompt_kv.blocks.append(HeldBlock(kv, kv_digest(kv)))
        return prompt_kv

    async def _prefill(self, seq: Sequence, hashes: list[bytes], prompt_kv: _PromptKv) -> SequenceContext:
        """Compute what the sequence lacks, pay the prefill time, share the blocks; returns the KV fingerprint."""
        context = self._compute_prompt_kv(seq, hashes, prompt_kv)
        uncached = len(seq.request.prompt_token_ids) - seq.cached_tokens
        self._prefilling_tokens += uncached
        latency = self._config.latency
        if self._slowdown() != 1.0 and latency != LatencyModel():
            self._metrics.faults_fired["slowdown"] += 1
        try:
            await self._sleep(latency.prefill_seconds(uncached, self._slowdown()))
        finally:
            self._prefilling_tokens -= uncached
        await self._publish_prompt_kv(seq, hashes, prompt_kv)
        return context

    def _compute_prompt_kv(
        self, seq: Sequence, hashes: list[bytes], prompt_kv: _PromptKv, count: bool = True
    ) -> SequenceContext:
        """Compute the blocks the prompt lacks (and, with `count`, count its tokens by source); returns the KV
        fingerprint."""
        config = self._config
        prompt = seq.request.prompt_token_ids
        seq.cached_tokens = self._cached_tokens(prompt_kv)
        if count:
            self._count_prompt(seq, prompt_kv)
        blocks = prompt_kv.blocks
        for block_hash in hashes[len(blocks) :]:
            kv = compute_kv(block_hash, config.block_bytes)
            blocks.append(HeldBlock(kv, kv_digest(kv)))
        return SequenceContext(
            prompt,
            [block.digest for block in blocks],
            hashes[-1] if hashes else self._root,
            block_size=config.block_size,
            kv_bytes_per_token=config.kv_bytes_per_token,
        )

    async def _publish_prompt_kv(self, seq: Sequence, hashes: list[bytes], prompt_kv: _PromptKv) -> None:
        """The prompt's blocks are computed: keep them in the prefix cache and share them through the pool."""
        cache = self._prefix_cache
        stored: list[int] = []
        evicted: list[bytes] = []
        for index, (block_hash, block) in enumerate(zip(hashes, prompt_kv.blocks, strict=True)):
            if block_hash not in cache:
                stored.append(index)
            evicted += cache.insert(block_hash, block)
        if self._kv_events is not None and cache.capacity > 0:
            self._kv_events.changed(seq.request.prompt_token_ids, hashes, stored, evicted)
        await self._share_kv(seq, hashes, prompt_kv)

    def _cached_tokens(self, prompt_kv: _PromptKv) -> int:
        """The prompt's tokens whose KV the engine has (its prefix cache, the pool, a handover)."""
        return len(prompt_kv.blocks) * self._config.block_size

    def _count_prompt(self, seq: Sequence, prompt_kv: _PromptKv) -> None:
        """Count the prompt's tokens by source from `seq.cached_tokens`, fixed before its blocks were computed
        (`prompt_kv.blocks` holds the computed ones too once the capacity model counts, at the first token)."""
        num_prompt = len(seq.request.prompt_token_ids)
        local_tokens = prompt_kv.local_hits * self._config.block_size
        external_tokens = seq.cached_tokens - local_tokens
        metrics = self._metrics
        metrics.prompt_tokens += num_prompt
        metrics.prompt_tokens_by_source["local_cache_hit"] += local_tokens
        metrics.prompt_tokens_by_source["external_kv_transfer"] += external_tokens
        metrics.prompt_tokens_by_source["local_compute"] += num_prompt - seq.cached_tokens
        metrics.prompt_tokens_cached_by_source["device"] += local_tokens
        external_tier = "p2p" if prompt_kv.handed_over else "external_unspecified"
        metrics.prompt_tokens_cached_by_source[external_tier] += external_tokens
        if self._config.enable_prefix_caching:
            metrics.prefix_cache_queries += num_prompt
            metrics.prefix_cache_hits += local_tokens
        if self._pool is not None:
            metrics.external_prefix_cache_queries += num_prompt - local_tokens
            metrics.external_prefix_cache_hits += external_tokens

    async def _share_kv(self, seq: Sequence, hashes: list[bytes], prompt_kv: _PromptKv) -> None:
        """Write new blocks to the pool (kv_producer/kv_both) and answer a prefill leg with where they are."""
        config = self._config
        transfer = seq.request.transfer
        keys = [block_key(config.model_name, block_hash) for block_hash in hashes]
        in_pool = list(prompt_kv.in_pool) if prompt_kv.in_pool is not None else [False] * len(keys)
        kv_error = None
        if self._pool is None:
            kv_error = "no KV pool configured on the prefill engine"
        elif not config.writes_pool:
            kv_error = f"engine {config.engine_id} is a kv_consumer and does not write the pool"
        elif prompt_kv.in_pool is not None:
            missing = {keys[i]: prompt_kv.blocks[i].kv for i, present in enumerate(in_pool) if not present}
            kv_error = await self._pool.write(missing)
            if kv_error is None:
                in_pool = [True] * len(keys)
        if transfer is None or not transfer.remote_decode:
            return
        shared = keys[: next((i for i, present in enumerate(in_pool) if not present), len(keys))]
        if kv_error is not None:
            log.warning(
                "request %s: prefill hands over %d of %d blocks: %s",
                seq.request.request_id,
                len(shared),
                len(keys),
                kv_error,
            )
        seq.kv_transfer_params = prefill_result_params(
            config, block_keys=shared, transfer_id=transfer.transfer_id, kv_error=kv_error
        )
        if transfer.transfer_id is not None and self._pool is not None and config.writes_pool:
            manifest = transfer_manifest(config, block_keys=shared, kv_error=kv_error)
            await self._pool.write_manifest(transfer_key(config.model_name, transfer.transfer_id), manifest)

    async def _decode(self, seq: Sequence, context: SequenceContext) -> AsyncIterator[tuple[int, str | None]]:
        latency = self._config.latency
        for position in range(seq.request.max_tokens):
            if position:
                await self._sleep(latency.inter_token_seconds(len(self._running), self._slowdown()))
            token, finish = self._next_token(seq, context)
            yield token, finish
            if finish is not None:
                return

    def _next_token(self, seq: Sequence, context: SequenceContext) -> tuple[int, str | None]:
        """Append the sequence's next output token; returns it and the finish reason once it is the last."""
        request = seq.request
        position = len(seq.output_token_ids)
        allow_eos = position >= request.min_tokens
        token = output_token(context.digest(), request.seed, len(context.tokens), allow_eos=allow_eos)
        seq.output_token_ids.append(token)
        context.append(token)
        self._metrics.generation_tokens += 1
        finish = None
        if token == EOS_ID and not request.ignore_eos:
            finish = "stop"
        elif position + 1 == request.max_tokens:
            finish = "length"
        if finish is not None:
            seq.finish_reason = finish
            metrics = self._metrics
            metrics.finished[finish] += 1
            metrics.request_generation_tokens.observe(len(seq.output_token_ids))
            metrics.request_params_max_tokens.observe(request.max_tokens)
            metrics.request_prefill_kv_computed_tokens.observe(
                len(request.prompt_token_ids) - seq.cached_tokens
            )
        return token, finish

    def _slowdown(self) -> float:
        return self._faults.faults.slowdown

    @staticmethod
    async def _sleep(seconds: float) -> None:
        if seconds > 0:
            await asyncio.sleep(seconds)


class _SteppedTokens:
    """Hands the tokens the step loop emits for one sequence to the coroutine answering its request."""

    def __init__(self, seq: Sequence, next_token: Callable[[], tuple[int, str | None]]) -> None:
        self._seq = seq
        self._next_token = next_token
        self._waiter: asyncio.Future[None] | None = None
        self._error: SimError | None = None

    def emit(self) -> bool:
        """Called by the scheduler once per token; True when that was the last one."""
        _, finish = self._next_token()
        self._wake()
        return finish is not None

    def fail(self, exc: BaseException) -> None:
        self._error = (
            exc if isinstance(exc, SimError) else SimError(500, f"motor-sim internal error: {exc!r}")
        )
        self._wake()

    async def wait_for(self, count: int) -> None:
        """Until the sequence has `count` output tokens (or finished with fewer); raises when the loop failed."""
        seq = self._seq
        while len(seq.output_token_ids) < count and seq.finish_reason is None:
            if self._error is not None:
                raise self._error
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
