"""The concurrent profile's flow (both legs at once) over a stand-in attempt: which leg's outcome decides it."""

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from motor.coordinator.dispatch.failures import LegFailure
from motor.coordinator.dispatch.flows import PD_FLOWS
from motor.kv.connectors import DispatchProfile

STALLED = LegFailure(
    "prefill_stalled", "prefill", None, "prefill-0: no prefill answer within the leg's deadline"
)


class StandInAttempt:
    """What the flow calls on an attempt; each leg ends as scripted, after `turns` turns of the event loop."""

    def __init__(
        self, prefill: LegFailure | None, prefill_turns: int, decode: LegFailure | None, decode_turns: int
    ):
        self.prefill_outcome, self.prefill_turns = prefill, prefill_turns
        self.decode_outcome, self.decode_turns = decode, decode_turns
        self.answering = False
        demand = SimpleNamespace(max_new_tokens=8, prompt_tokens=16)
        self.dispatch = SimpleNamespace(
            request=SimpleNamespace(demand=demand, body={"prompt": "x", "max_tokens": 8}),
            wait_mark=lambda: 0.0,
            parallel_waits=lambda mark, seconds: None,
        )

    async def pick(self, role: str) -> Any:
        return SimpleNamespace(host="127.0.0.1", engine_id=f"{role}-0", bootstrap_port=None)

    def client_leg(self, target: Any, *_: int) -> Any:
        return SimpleNamespace(target=target)

    def prefill_leg(self, target: Any) -> Any:
        return SimpleNamespace(target=target, task=None)

    def prefill_in_background(self, leg: Any, params: dict[str, Any], **extra: Any) -> None:
        leg.task = asyncio.ensure_future(self._end(self.prefill_outcome, self.prefill_turns))
        leg.task.add_done_callback(lambda task: task.cancelled() or task.exception())  # as the attempt does
        self.prefill_task = leg.task

    async def open_client_leg(self, leg: Any, body: bytes) -> None:
        await self._end(self.decode_outcome, self.decode_turns)
        self.answering = True  # the decode leg's first output arrived: the attempt relays it to the client

    @staticmethod
    async def _end(failure: LegFailure | None, turns: int) -> None:
        for _ in range(turns):
            await asyncio.sleep(0)
        if failure is not None:
            raise failure


async def run_concurrent(attempt: StandInAttempt) -> None:
    await PD_FLOWS[DispatchProfile.CONCURRENT].run(attempt)  # type: ignore[arg-type]


async def test_decode_output_in_the_same_turn_as_a_prefill_failure_answers_the_request() -> None:
    """The decode leg produced output (the KV arrived) in the turn the prefill leg's deadline fired: the request
    is being answered, the late prefill does not fail it (it did, as a 504 with no retry: output existed)."""
    attempt = StandInAttempt(STALLED, 0, None, 0)
    await run_concurrent(attempt)  # returns: the flow hands the decode leg's output on
    assert attempt.answering
    assert attempt.prefill_task.done() and attempt.prefill_task.exception() is STALLED, "the prefill did fail"


async def test_a_prefill_failure_before_any_decode_output_fails_the_attempt() -> None:
    with pytest.raises(LegFailure) as failed:
        await run_concurrent(StandInAttempt(STALLED, 0, None, 5))
    assert failed.value is STALLED


async def test_when_both_legs_fail_the_prefill_failure_is_the_cause() -> None:
    decode_failed = LegFailure("closed", "decode", None, "decode-0: connection reset")
    with pytest.raises(LegFailure) as failed:
        await run_concurrent(StandInAttempt(STALLED, 0, decode_failed, 0))
    assert failed.value is STALLED


async def test_a_prefill_failure_after_decode_output_does_not_reach_the_flow() -> None:
    attempt = StandInAttempt(STALLED, 5, None, 0)
    await run_concurrent(attempt)
    assert not attempt.prefill_task.done()
    with pytest.raises(LegFailure):
        await attempt.prefill_task
