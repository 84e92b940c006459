"""vLLM's engine loop re-steps every millisecond while its requests only wait for KV transfers.

When a step runs no model but requests remain (a decode engine's requests waiting for their KV, a prefill
engine's finished requests whose KV the decode side has not pulled yet), `EngineCoreProc._process_engine_step`
sleeps a fixed 1 ms and steps again: schedule, build the connectors' metadata, poll them. On a GPU server that
costs an otherwise idle core; on CPU engines it takes the cores the awaited transfers run on (Mooncake's
threads). On this 2-core machine three engines doing it kept the load average at 10–15, and the receiving
transfer threads waited for a core for half a second or more 47–129 times in a 300-request soak; with the wait
below the prefill engines used 30–47 % less CPU for the same requests (docs/design/vllm-cpu-pd-stall.md).

The installed method must be vLLM 0.32's statement for statement (`Facts.engine_idle_step_sleeps_fixed`): the
replacement runs the same statements with a growing wait in place of the fixed sleep. Consecutive idle steps
wait 1, 2, 4 … ms up to `DEFAULT_MAX_WAIT_S`, on the engine's input queue, so a new request or an abort ends the
wait at once; a step that runs the model starts again at 1 ms. A finished transfer is noticed at most that long
after. `MOTOR_IDLE_STEP_MAX_WAIT_S` sets the longest wait; 0.001 or less keeps vLLM's fixed 1 ms.
"""

import os
import queue
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from motor.engine.patches.facts import Facts
from motor.engine.patches.patch import (
    Decision,
    Patch,
    PatchTargetError,
    replace_method,
    seconds_setting,
    without_accelerator,
)

TARGET = "vllm.v1.engine.core"
MAX_WAIT_ENV = "MOTOR_IDLE_STEP_MAX_WAIT_S"
FIRST_WAIT_S = 0.001  # vLLM's own
# Far below a prefill or a KV transfer on CPU (tens to hundreds of ms for the smallest model), and a tenth of the
# steps the fixed 1 ms sleep runs while nothing moves.
DEFAULT_MAX_WAIT_S = 0.016


def decide(facts: Facts) -> Decision:
    if facts.vllm_version is None:
        return Decision(False, "vLLM is not installed")
    if not facts.engine_idle_step_sleeps_fixed:
        return Decision(
            False,
            f"vLLM {facts.vllm_version}'s engine loop has no fixed 1 ms sleep between steps that run no model",
        )
    if facts.accelerator_present:
        return Decision(
            False, "an accelerator is present: the host's cores are not what the transfers wait for"
        )
    when = without_accelerator(facts)
    return Decision(
        True,
        f"vLLM {facts.vllm_version}'s engine loop steps every 1 ms while its requests only wait for KV transfers; "
        f"{when}, those steps take the CPU the transfers need: consecutive idle steps wait twice as long each time, "
        f"up to {DEFAULT_MAX_WAIT_S * 1000:g} ms, on the input queue ({MAX_WAIT_ENV} overrides)",
    )


def max_wait_seconds(environ: Mapping[str, str]) -> float:
    """The longest wait between idle steps: `MOTOR_IDLE_STEP_MAX_WAIT_S` when it is a finite number >= 0."""
    return seconds_setting(environ, MAX_WAIT_ENV, DEFAULT_MAX_WAIT_S)


class IdleBackoff:
    """The wait after each step that ran no model: doubling from 1 ms up to `longest`; back to 1 ms after a step
    that ran it, or a request that ended the wait."""

    def __init__(self, longest: float) -> None:
        self.longest = max(longest, FIRST_WAIT_S)
        self.next_wait = FIRST_WAIT_S

    def take(self) -> float:
        wait = self.next_wait
        self.next_wait = min(wait * 2, self.longest)
        return wait

    def reset(self) -> None:
        self.next_wait = FIRST_WAIT_S


def wait_for_input(engine: Any, seconds: float) -> bool:
    """Wait up to `seconds` for the engine's next client request and handle it; True when one came."""
    try:
        request = engine.input_queue.get(timeout=seconds)
    except queue.Empty:
        return False
    engine._handle_client_request(*request)
    return True


def backing_off_step(longest: float) -> Callable[[Any], bool]:
    def _process_engine_step(self: Any) -> bool:
        outputs, model_executed = self.step_fn()
        for output in outputs.items() if outputs else ():
            self.output_queue.put_nowait(output)
        self.post_step(model_executed)
        backoff = self.__dict__.get("_motor_idle_backoff")
        if backoff is None:
            backoff = self.__dict__["_motor_idle_backoff"] = IdleBackoff(longest)
        if model_executed or not self.scheduler.has_requests() or wait_for_input(self, backoff.take()):
            backoff.reset()
        return model_executed

    return _process_engine_step


def apply(module: ModuleType | None, _facts: Facts) -> None:
    engine_class = getattr(module, "EngineCoreProc", None)
    if engine_class is None or not hasattr(engine_class, "_process_engine_step"):
        raise PatchTargetError(f"{TARGET} has no EngineCoreProc._process_engine_step")
    longest = max_wait_seconds(os.environ)
    if longest <= FIRST_WAIT_S:
        return
    replace_method(engine_class, "_process_engine_step", backing_off_step(longest))


PATCH = Patch(
    name="cpu-idle-step-backoff",
    summary="vLLM's engine loop waits up to 16 ms, not 1 ms, between steps that only wait for KV transfers on CPU",
    decide=decide,
    targets=(TARGET,),
    apply=apply,
)
