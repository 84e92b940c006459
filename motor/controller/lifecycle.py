"""Instance lifecycle: initial → active ↔ inactive → deleted, as a pure transition table."""

from enum import StrEnum

from motor.protocol.controller import EngineState
from motor.protocol.instances import InstanceStatus


class Signal(StrEnum):
    NORMAL = "normal"  # the engine answers its health probe
    INIT = "init"  # the engine is (re)starting
    ABNORMAL = "abnormal"  # the engine fails its probe, crashed or was stopped
    HEARTBEAT_TIMEOUT = "heartbeat_timeout"  # active, but silent for instance_heartbeat_timeout
    EXPIRED = "expired"  # not active and silent for instance_expired_timeout


_ENGINE_SIGNAL: dict[EngineState, Signal] = {
    "healthy": Signal.NORMAL,
    "starting": Signal.INIT,
    "unhealthy": Signal.ABNORMAL,
    "crash_looping": Signal.ABNORMAL,
    "stopped": Signal.ABNORMAL,
}

_TRANSITIONS: dict[tuple[InstanceStatus, Signal], InstanceStatus] = {
    ("initial", Signal.NORMAL): "active",
    ("initial", Signal.ABNORMAL): "inactive",
    ("initial", Signal.EXPIRED): "deleted",
    ("active", Signal.INIT): "inactive",
    ("active", Signal.ABNORMAL): "inactive",
    ("active", Signal.HEARTBEAT_TIMEOUT): "inactive",
    ("inactive", Signal.NORMAL): "active",
    ("inactive", Signal.EXPIRED): "deleted",
}


def engine_signal(state: EngineState) -> Signal:
    return _ENGINE_SIGNAL[state]


def next_status(status: InstanceStatus, signal: Signal) -> InstanceStatus:
    """The status after `signal`; unchanged when the pair has no transition (e.g. active + NORMAL)."""
    return _TRANSITIONS.get((status, signal), status)
