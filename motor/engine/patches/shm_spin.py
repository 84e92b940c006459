"""vLLM's shared-memory message queue readers spin for a hard-coded second after every read.

With the multiprocessing executor (always used on CPU), the worker reads each scheduler output and the EngineCore
reads each model output from a shared-memory queue. After a read, a reader polls with `sched_yield` for
`SpinCondition(busy_loop_s=1)` before it parks on the queue's notification socket. Engine steps come milliseconds
apart, so while an engine serves requests both of its readers spin all the time, and for a second after its last
step. On a GPU server that spinning costs an otherwise idle core and buys latency; on CPU engines it takes the
cores the model's own compute, the other engines on the host and Mooncake's transfer threads need
(docs/design/vllm-cpu-pd-stall.md has the measurements). The fix shortens the readers' window on CPU engines to
`DEFAULT_SPIN_S`; `VLLM_SHM_BROADCAST_BUSY_LOOP_S` (the name of the setting proposed upstream) overrides it.
"""

import functools
import inspect
import logging
import math
import os
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from motor.engine.patches.facts import Facts
from motor.engine.patches.registry import Decision, Patch, PatchTargetError, replace_method

TARGET = "vllm.distributed.device_communicators.shm_broadcast"
SPIN_CLASS = "SpinCondition"
SPIN_ENV = "VLLM_SHM_BROADCAST_BUSY_LOOP_S"
# Longer than the gap between a reader's reads inside one engine step, shorter than any step of a real model.
DEFAULT_SPIN_S = 0.002

log = logging.getLogger("motor.engine.patches")


def decide(facts: Facts) -> Decision:
    if facts.vllm_version is None:
        return Decision(False, "vLLM is not installed")
    if not facts.shm_reader_spins_one_second:
        return Decision(
            False,
            f"vLLM {facts.vllm_version}'s shared-memory queue readers have no hard-coded 1 s busy loop (or it is "
            f"configurable with {SPIN_ENV})",
        )
    if facts.accelerator_present:
        return Decision(False, "an accelerator is present: the spinning reader cores buy step latency there")
    when = (
        "no accelerator is present" if facts.accelerator_present is False else "if no accelerator is present"
    )
    return Decision(
        True,
        f"vLLM {facts.vllm_version}'s shared-memory queue readers (EngineCore, worker) spin with sched_yield for "
        f"a hard-coded 1 s after every read, i.e. all the time while the engine serves; {when}, that takes the "
        f"CPU from the engines' compute and KV transfers: readers park after {DEFAULT_SPIN_S * 1000:g} ms "
        f"({SPIN_ENV} overrides)",
    )


def reader_spin_seconds(environ: Mapping[str, str]) -> float:
    """The readers' busy-loop window: `VLLM_SHM_BROADCAST_BUSY_LOOP_S` when it is a finite number >= 0."""
    raw = environ.get(SPIN_ENV)
    if raw is None:
        return DEFAULT_SPIN_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        log.warning("%s=%r is not a number of seconds >= 0; using %g", SPIN_ENV, raw, DEFAULT_SPIN_S)
        return DEFAULT_SPIN_S
    return value


def apply(module: ModuleType | None, _facts: Facts) -> None:
    spin = getattr(module, SPIN_CLASS, None)
    if spin is None or "busy_loop_s" not in inspect.signature(spin.__init__).parameters:
        raise PatchTargetError(f"{TARGET} has no {SPIN_CLASS}.__init__ taking busy_loop_s")
    original_init = spin.__init__
    seconds = reader_spin_seconds(os.environ)

    @functools.wraps(original_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        # vLLM's callers never pass busy_loop_s (the 4th argument); one that does keeps its value.
        if len(args) < 4 and "busy_loop_s" not in kwargs:
            kwargs["busy_loop_s"] = seconds
        original_init(self, *args, **kwargs)

    replace_method(spin, "__init__", __init__)


PATCH = Patch(
    name="cpu-shm-reader-spin",
    summary="vLLM's shared-memory queue readers stop spinning after 2 ms instead of 1 s on CPU engines",
    decide=decide,
    targets=(TARGET,),
    apply=apply,
)
