"""What a fix is: a `Patch` with a predicate over `Facts` that says whether it applies here and why, and the
helpers the fixes share. The fixes motor knows are listed in registry.py."""

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from motor.engine.patches.facts import Facts


@dataclass(frozen=True)
class Decision:
    applies: bool
    why: str


@dataclass(frozen=True)
class Patch:
    name: str
    summary: str
    decide: Callable[[Facts], Decision]
    # Applied when the first of these modules finishes importing; () means at interpreter start-up.
    targets: tuple[str, ...]
    apply: Callable[[ModuleType | None, Facts], None]


class PatchTargetError(RuntimeError):
    """The target module does not have the shape the patch expects (a vLLM version it was not written for)."""


PATCHED_MARK = "__motor_patched__"

log = logging.getLogger("motor.engine.patches")


def seconds_setting(environ: Mapping[str, str], name: str, default: float) -> float:
    """`environ[name]` when it is a finite number of seconds >= 0, else `default` (warned about when set)."""
    raw = environ.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        log.warning("%s=%r is not a number of seconds >= 0; using %g", name, raw, default)
        return default
    return value


def without_accelerator(facts: Facts) -> str:
    """How a CPU-only fix's reason names its condition: known, or to be checked when the target is imported."""
    return (
        "no accelerator is present" if facts.accelerator_present is False else "if no accelerator is present"
    )


def replace_method(cls: type, name: str, replacement: Callable[..., Any]) -> None:
    """Install `replacement` as `cls.<name>`, once: a method motor already installed there stays."""
    if getattr(getattr(cls, name), PATCHED_MARK, False):
        return
    setattr(replacement, PATCHED_MARK, True)
    replacement.__qualname__ = f"{cls.__name__}.{name}"
    setattr(cls, name, replacement)
