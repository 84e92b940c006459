"""vLLM's shared-memory message queues spin-wait with sched_yield, which on CPU engines takes the cores.

With the multiprocessing executor (always used on CPU), the worker reads each scheduler output and the EngineCore
reads each model output from a shared-memory queue. After a read, a reader polls the queue in a tight
`sched_yield` loop for a hard-coded second (`SpinCondition(busy_loop_s=1)`) before it parks on the queue's
notification socket. Engine steps come milliseconds apart, so while an engine serves requests both of its readers
spin all the time, and for a second after its last step. On a GPU server that costs an otherwise idle core and
buys latency; on CPU engines the spinning takes the cores the model's own compute, the other engines on the host
and Mooncake's transfer threads need (docs/design/vllm-cpu-pd-stall.md has the measurements).

The fix keeps vLLM's protocol as it is (the same busy window, the same notification path) and makes each
busy-wait poll sleep `DEFAULT_SLEEP_S` instead of yielding: the queue is checked about every half millisecond,
which costs a few percent of one core instead of a core per reader. Shortening the window instead would park
readers on the notification socket at every step, where a notification that is lost costs up to 5 s
(`SHM_READER_RECHECK_INTERVAL_MS`), which the soak measured. `VLLM_SHM_BROADCAST_BUSY_SLEEP_S`, the setting
proposed upstream for the same purpose, overrides the sleep; 0 restores the plain `sched_yield`.
"""

import os
import time
from collections.abc import Callable, Mapping
from types import ModuleType

from motor.engine.patches.facts import SHM_SPIN_ENVS, Facts
from motor.engine.patches.patch import (
    PATCHED_MARK,
    Decision,
    Patch,
    PatchTargetError,
    seconds_setting,
    without_accelerator,
)

TARGET = "vllm.distributed.device_communicators.shm_broadcast"
SLEEP_ENV = "VLLM_SHM_BROADCAST_BUSY_SLEEP_S"
# Well below one decode step of any model (a few ms for a 1.3 M-parameter toy on CPU).
DEFAULT_SLEEP_S = 0.0005


def decide(facts: Facts) -> Decision:
    if facts.vllm_version is None:
        return Decision(False, "vLLM is not installed")
    if not facts.shm_reader_spins_one_second:
        return Decision(
            False,
            f"vLLM {facts.vllm_version}'s shared-memory queue readers have no hard-coded 1 s sched_yield loop (or "
            f"it is configurable: {', '.join(SHM_SPIN_ENVS)})",
        )
    if facts.accelerator_present:
        return Decision(False, "an accelerator is present: a spinning reader core buys step latency there")
    when = without_accelerator(facts)
    return Decision(
        True,
        f"vLLM {facts.vllm_version}'s shared-memory queue readers (EngineCore, worker) spin with sched_yield for "
        f"a hard-coded 1 s after every read, i.e. all the time while the engine serves; {when}, that takes the "
        f"CPU from the engines' compute and KV transfers: each poll sleeps {DEFAULT_SLEEP_S * 1000:g} ms instead "
        f"({SLEEP_ENV} overrides)",
    )


def busy_sleep_seconds(environ: Mapping[str, str]) -> float:
    """The sleep per busy-wait poll: `VLLM_SHM_BROADCAST_BUSY_SLEEP_S` when it is a finite number >= 0."""
    return seconds_setting(environ, SLEEP_ENV, DEFAULT_SLEEP_S)


def sleeping_poll(seconds: float) -> Callable[[], None]:
    def poll() -> None:
        time.sleep(seconds)

    setattr(poll, PATCHED_MARK, True)
    return poll


def apply(module: ModuleType | None, _facts: Facts) -> None:
    current = getattr(module, "sched_yield", None)
    if current is None or not hasattr(module, "SpinCondition"):
        raise PatchTargetError(f"{TARGET} has no SpinCondition spinning on its module-level sched_yield")
    seconds = busy_sleep_seconds(os.environ)
    if getattr(current, PATCHED_MARK, False) or seconds == 0:
        return
    # shm_broadcast looks the name up at every poll (SpinCondition.wait, MessageQueue.acquire_write).
    module.sched_yield = sleeping_poll(seconds)  # type: ignore[union-attr]


PATCH = Patch(
    name="cpu-shm-busy-sleep",
    summary="vLLM's shared-memory queues poll every 0.5 ms instead of spinning with sched_yield on CPU engines",
    decide=decide,
    targets=(TARGET,),
    apply=apply,
)
