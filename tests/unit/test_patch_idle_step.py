"""The cpu-idle-step-backoff patch: when it applies, how long idle steps wait, and the step it installs."""

import queue
from types import ModuleType
from typing import Any

import pytest

from motor.engine.patches import idle_step
from motor.engine.patches.facts import Facts, engine_idle_step_sleeps_fixed, gather_facts
from motor.engine.patches.patch import PATCHED_MARK, PatchTargetError

# The shape of vLLM 0.32's EngineCoreProc._process_engine_step (written for the test, not copied).
FIXED_SLEEP_SOURCE = '''
class EngineCoreProc(EngineCore):
    def _process_engine_step(self) -> bool:
        """Step once."""
        outputs, model_executed = self.step_fn()
        for output in outputs.items() if outputs else ():
            self.output_queue.put_nowait(output)
        self.post_step(model_executed)
        # a comment
        if not model_executed and self.scheduler.has_requests():
            time.sleep(0.001)

        return model_executed

    def _notify_idle_state_callbacks(self) -> None:
        pass
'''


@pytest.mark.parametrize(
    ("source", "fixed"),
    [
        (FIXED_SLEEP_SOURCE, True),
        (FIXED_SLEEP_SOURCE.replace("time.sleep(0.001)", "time.sleep(self.idle_wait)"), False),
        (FIXED_SLEEP_SOURCE.replace("time.sleep(0.001)", "self.wait_for_transfers()"), False),
        # a statement the patch's step would not run
        (FIXED_SLEEP_SOURCE.replace("        # a comment\n", "        self.publish_stats()\n"), False),
        (FIXED_SLEEP_SOURCE.replace("self.post_step(model_executed)\n", ""), False),
        # the sleep belongs to another method: not the engine step's
        (
            FIXED_SLEEP_SOURCE.replace(
                "        # a comment\n", "        return model_executed\n\n    def other(self) -> None:\n"
            ),
            False,
        ),
        ("", False),
    ],
)
def test_the_fixed_sleep_is_read_from_the_installed_source(source: str, fixed: bool) -> None:
    assert engine_idle_step_sleeps_fixed(source) is fixed


def test_gathered_facts_see_vllm_0_32s_fixed_sleep() -> None:
    facts = gather_facts()
    if facts.vllm_version == "0.32.0":
        assert facts.engine_idle_step_sleeps_fixed, "vLLM 0.32 sleeps a fixed 1 ms between idle steps"
        from vllm.v1.engine import core  # what the patch replaces and calls is there

        assert callable(core.EngineCoreProc._process_engine_step)
        assert callable(core.EngineCoreProc._handle_client_request)


@pytest.mark.parametrize(("accelerator", "applies"), [(False, True), (None, True), (True, False)])
def test_applies_only_on_cpu_engines_whose_vllm_sleeps_a_fixed_millisecond(
    accelerator: bool | None, applies: bool
) -> None:
    decision = idle_step.decide(
        Facts(vllm_version="0.32.0", accelerator_present=accelerator, engine_idle_step_sleeps_fixed=True)
    )
    assert decision.applies is applies and decision.why
    assert not idle_step.decide(Facts(vllm_version="0.33.0", accelerator_present=False)).applies
    assert not idle_step.decide(Facts(engine_idle_step_sleeps_fixed=True)).applies


def test_idle_waits_double_up_to_the_longest_and_restart_after_a_reset() -> None:
    backoff = idle_step.IdleBackoff(0.016)
    assert [backoff.take() for _ in range(7)] == [0.001, 0.002, 0.004, 0.008, 0.016, 0.016, 0.016]
    backoff.reset()
    assert backoff.take() == 0.001
    assert idle_step.IdleBackoff(0.0).take() == 0.001  # never shorter than vLLM's own


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(None, idle_step.DEFAULT_MAX_WAIT_S), ("0", 0.0), ("0.05", 0.05), ("-1", idle_step.DEFAULT_MAX_WAIT_S),
     ("inf", idle_step.DEFAULT_MAX_WAIT_S), ("soon", idle_step.DEFAULT_MAX_WAIT_S)],
)  # fmt: skip
def test_the_longest_wait_from_the_environment(value: str | None, seconds: float) -> None:
    environ = {} if value is None else {idle_step.MAX_WAIT_ENV: value}
    assert idle_step.max_wait_seconds(environ) == seconds


class ScriptedInputs:
    """The engine's input queue: records each wait's timeout; a request arrives during the waits listed."""

    def __init__(self, arrivals: dict[int, tuple[str, Any]]) -> None:
        self.arrivals = arrivals
        self.timeouts: list[float] = []

    def get(self, timeout: float) -> tuple[str, Any]:
        self.timeouts.append(timeout)
        if len(self.timeouts) - 1 in self.arrivals:
            return self.arrivals[len(self.timeouts) - 1]
        raise queue.Empty


class FakeEngine:
    """An EngineCoreProc reduced to what the step touches: each step runs the model or not, as scripted."""

    def __init__(
        self,
        executed: list[bool],
        has_requests: bool = True,
        arrivals: dict[int, tuple[str, Any]] | None = None,
    ) -> None:
        self.executed = executed
        self.input_queue = ScriptedInputs(arrivals or {})
        self.output_queue: queue.Queue[Any] = queue.Queue()
        self.scheduler = type("Scheduler", (), {"has_requests": lambda _self: has_requests})()
        self.handled: list[tuple[str, Any]] = []

    def step_fn(self) -> tuple[dict[int, str], bool]:
        ran = self.executed.pop(0)
        return ({0: "tokens"} if ran else {}), ran

    def post_step(self, model_executed: bool) -> None:
        pass

    def _handle_client_request(self, kind: str, request: Any) -> None:
        self.handled.append((kind, request))


def run_steps(engine: FakeEngine, longest: float) -> list[bool]:
    step = idle_step.backing_off_step(longest)
    return [step(engine) for _ in range(len(engine.executed))]


def test_idle_steps_wait_longer_each_time_on_the_input_queue() -> None:
    idle = FakeEngine([False] * 6)
    assert run_steps(idle, 0.02) == [False] * 6
    assert idle.input_queue.timeouts == [0.001, 0.002, 0.004, 0.008, 0.016, 0.02]


def test_model_steps_and_steps_with_nothing_left_do_not_wait() -> None:
    busy = FakeEngine([True] * 5)
    assert run_steps(busy, 0.02) == [True] * 5
    assert busy.input_queue.timeouts == [] and busy.output_queue.qsize() == 5
    done = FakeEngine([False] * 5, has_requests=False)  # vLLM's loop then blocks on the queue itself
    run_steps(done, 0.02)
    assert done.input_queue.timeouts == []


def test_a_request_or_a_model_step_starts_the_waits_again_at_one_millisecond() -> None:
    engine = FakeEngine([False, False, False, False, False, True, False], arrivals={2: ("ADD", "req-1")})
    run_steps(engine, 0.02)
    assert engine.handled == [("ADD", "req-1")]
    # 1, 2 ms; the 4 ms wait ended by the request; 1, 2 ms; a model step (no wait); 1 ms
    assert engine.input_queue.timeouts == [0.001, 0.002, 0.004, 0.001, 0.002, 0.001]


def stand_in_core() -> ModuleType:
    module = ModuleType("vllm.v1.engine.core")

    class EngineCoreProc:
        def _process_engine_step(self) -> bool:
            return False

    module.EngineCoreProc = EngineCoreProc  # type: ignore[attr-defined]
    return module


def test_apply_replaces_the_engine_step_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(idle_step.MAX_WAIT_ENV, raising=False)
    module = stand_in_core()
    idle_step.apply(module, Facts())
    replaced = module.EngineCoreProc._process_engine_step
    assert getattr(replaced, PATCHED_MARK)
    idle_step.apply(module, Facts())
    assert module.EngineCoreProc._process_engine_step is replaced
    with pytest.raises(PatchTargetError):
        idle_step.apply(ModuleType("vllm.v1.engine.core"), Facts())


def test_a_longest_wait_of_one_millisecond_keeps_vllms_step(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(idle_step.MAX_WAIT_ENV, "0")
    module = stand_in_core()
    original = module.EngineCoreProc._process_engine_step
    idle_step.apply(module, Facts())
    assert module.EngineCoreProc._process_engine_step is original
