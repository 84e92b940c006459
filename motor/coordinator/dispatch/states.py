"""The states of one dispatch attempt and of its legs, and which transitions are allowed.

An attempt (`motor.coordinator.dispatch.attempt.Attempt`, the only code that moves these states) is one try at
getting the client-facing leg to its first output, plus the relay of the rest:

    ADMITTED  → ENCODE | DECODE | PREFILL
    ENCODE    → DECODE | PREFILL (the encode leg answered; the flow's legs follow)
    DECODE    → PREFILL (decode_first: the decode engine called back) | STREAMING (aggregated)
    PREFILL   → HANDOVER | STREAMING (concurrent: the decode leg's output came before the prefill's answer)
    HANDOVER  → STREAMING
    STREAMING → DONE | FAILED (the relay ends the stream with an error event)
    ADMITTED, ENCODE, DECODE, PREFILL, HANDOVER → RETRYING (another attempt follows) | FAILED (error response)
    every phase that is not final → ABORTED (client gone, client not reading, infer_timeout, shutdown)

The flows: aggregated ADMITTED → DECODE → STREAMING → DONE; prefill_first ADMITTED → PREFILL → HANDOVER →
STREAMING → DONE; concurrent ADMITTED → PREFILL (both legs sent) → HANDOVER → STREAMING → DONE; decode_first
ADMITTED → DECODE → PREFILL → HANDOVER → STREAMING → DONE. A request with multimodal items, while encode
instances are routable, passes ENCODE first: ADMITTED → ENCODE → (the flow's first phase).

- ADMITTED: the attempt started; nothing is sent yet.
- ENCODE: the encode leg runs (its answer is awaited whole and discarded) before any other leg is sent.
- DECODE: the client-facing leg is sent and awaits its first output with no prefill answer in play
  (aggregated; decode_first before the decode engine called back).
- PREFILL: a prefill leg runs (prefill_first before the decode leg exists; concurrent with the decode leg
  already sent; decode_first once the callback started it).
- HANDOVER: the prefill answered; the decode leg takes the KV over and awaits its first output (`kv_wait`).
- STREAMING: the client-facing leg produced output; from here on the response belongs to the client. This is
  the retry guard: RETRYING is not reachable from STREAMING, so a later failure ends the stream instead.
- DONE / FAILED / RETRYING / ABORTED: final for the attempt.

Per-leg sub-states (a leg is one engine request; concurrent runs two at once, decode_first starts the prefill
leg from the decode engine's callback): PICKED (endpoint chosen, load allocated) → SENT (written, answer
awaited) → RECEIVING (client-facing leg: first output in hand) → DONE; FAILED or ABORTED (closed by the
coordinator) from any state that is not final. Prefill and encode legs go SENT → DONE with their whole answer.
"""

from enum import IntEnum
from typing import TYPE_CHECKING, Protocol

from motor.coordinator.scheduling.kv_matches import KvPrediction

if TYPE_CHECKING:
    # import cycle: type hints only — the attempts and legs whose transitions it checks
    from motor.coordinator.dispatch.attempt import Attempt, Leg


class Phase(IntEnum):
    ADMITTED = 0
    DECODE = 1
    PREFILL = 2
    HANDOVER = 3
    STREAMING = 4
    DONE = 5
    FAILED = 6
    RETRYING = 7
    ABORTED = 8
    ENCODE = 9


class LegState(IntEnum):
    PICKED = 0
    SENT = 1
    RECEIVING = 2
    DONE = 3
    FAILED = 4
    ABORTED = 5


# Looking an enum member up on its class costs about 0.5 µs on Python 3.11 (a global about 0.05 µs); the
# per-request code compares against these module-level names instead.
ADMITTED, DECODE, PREFILL, HANDOVER, STREAMING, DONE, FAILED, RETRYING, ABORTED, ENCODE = Phase
PICKED, SENT, RECEIVING, LEG_DONE, LEG_FAILED, LEG_ABORTED = LegState

_ENDS = (Phase.RETRYING, Phase.FAILED, Phase.ABORTED)
PHASE_TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    Phase.ADMITTED: frozenset({Phase.ENCODE, Phase.DECODE, Phase.PREFILL, *_ENDS}),
    Phase.ENCODE: frozenset({Phase.DECODE, Phase.PREFILL, *_ENDS}),
    Phase.DECODE: frozenset({Phase.PREFILL, Phase.STREAMING, *_ENDS}),
    Phase.PREFILL: frozenset({Phase.HANDOVER, Phase.STREAMING, *_ENDS}),
    Phase.HANDOVER: frozenset({Phase.STREAMING, *_ENDS}),
    Phase.STREAMING: frozenset({Phase.DONE, Phase.FAILED, Phase.ABORTED}),
    Phase.DONE: frozenset(),
    Phase.FAILED: frozenset(),
    Phase.RETRYING: frozenset(),
    Phase.ABORTED: frozenset(),
}
LEG_TRANSITIONS: dict[LegState, frozenset[LegState]] = {
    LegState.PICKED: frozenset({LegState.SENT, LegState.FAILED, LegState.ABORTED}),
    LegState.SENT: frozenset({LegState.RECEIVING, LegState.DONE, LegState.FAILED, LegState.ABORTED}),
    LegState.RECEIVING: frozenset({LegState.DONE, LegState.FAILED, LegState.ABORTED}),
    LegState.DONE: frozenset(),
    LegState.FAILED: frozenset(),
    LegState.ABORTED: frozenset(),
}
# Indexed by the state's value: a tuple lookup is cheaper than hashing an enum member on every transition.
PHASE_NEXT: tuple[frozenset[Phase], ...] = tuple(PHASE_TRANSITIONS[p] for p in Phase)
LEG_NEXT: tuple[frozenset[LegState], ...] = tuple(LEG_TRANSITIONS[s] for s in LegState)


# The transitions a DispatchObserver is told of when the request does not log every transition (DEBUG): a leg's
# end, an attempt's first output and its retry — those the metrics need (tests/unit/test_coordinator_attempt.py
# checks the others feed none).
OBSERVED_LEG_STATES = frozenset({LegState.DONE, LegState.FAILED, LegState.ABORTED})
OBSERVED_PHASES = frozenset({Phase.STREAMING, Phase.RETRYING})


class InvalidTransition(RuntimeError):
    """A bug: code tried a transition the tables do not allow."""


class DispatchObserver(Protocol):
    """Sees transitions with the time spent in the state left (the per-stage timing and metrics hook;
    `motor.coordinator.dispatch.observe.MetricsObserver` is the one in use): every transition of a request
    that logs them (`logs_transitions()` when it arrived), else those into OBSERVED_LEG_STATES and
    OBSERVED_PHASES."""

    def logs_transitions(self) -> bool: ...

    def phase_changed(self, attempt: "Attempt", old: Phase, new: Phase, seconds: float) -> None: ...

    def leg_changed(self, leg: "Leg", old: LegState, new: LegState, seconds: float) -> None: ...

    def leg_cancelled(self, leg: "Leg", reason: str) -> None: ...

    def prefill_stalled(self, leg: "Leg") -> None: ...

    def kv_predicted(self, leg: "Leg", prediction: KvPrediction, cached: int) -> None: ...
