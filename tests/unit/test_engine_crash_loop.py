"""An engine that keeps exiting during its start: crash_looping at the node manager (with its exit code and
log tail), an abnormal signal at the controller, kept in the instance view, shown by `motor status`."""

import io
from pathlib import Path

from rich.console import Console

from motor.cli import local_status
from motor.controller.lifecycle import Signal, engine_signal
from motor.controller.registry import InstanceRegistry, Timeouts
from motor.node_manager.engine_process import EngineCommand
from motor.node_manager.engine_supervisor import CRASH_LOOP_AFTER, EngineSupervisor
from motor.protocol.controller import ControllerState, Heartbeat, Registration
from motor.protocol.instances import Endpoint


def supervisor(tmp_path: Path, reported: list[str]) -> EngineSupervisor:
    log = tmp_path / "engine.log"
    log.write_text("starting\nerror: the model directory /m does not exist\n")
    command = EngineCommand(argv=["x"], env={}, files={}, log_path=log, pid_path=tmp_path / "engine.pid")
    return EngineSupervisor(command, "http://127.0.0.1:1/status", session=None, on_change=reported.append)  # type: ignore[arg-type]


def test_exits_before_healthy_make_it_crash_looping_with_the_reason(tmp_path: Path) -> None:
    reported: list[str] = []
    engines = supervisor(tmp_path, reported)
    child = engines._engine
    child.last_exit_code = 2
    child.exits_before_healthy = 1
    engines._report("restarting")
    assert engines.state == "unhealthy" and engines.failure is None, "one exit is not a loop yet"
    child.exits_before_healthy = CRASH_LOOP_AFTER
    engines._report("restarting")
    engines._report("starting")
    assert reported == ["unhealthy", "crash_looping"]
    failure = engines.failure
    assert failure is not None
    assert "exited with code 2 before it became healthy, 2 starts in a row" in failure
    assert "the model directory /m does not exist" in failure
    child.exits_before_healthy = 0
    engines._report("healthy")
    assert engines.state == "healthy" and engines.failure is None


def test_the_controller_keeps_the_reason_and_takes_the_instance_out() -> None:
    assert engine_signal("crash_looping") is Signal.ABNORMAL
    registry = InstanceRegistry(Timeouts(heartbeat=10, expired=300))
    registry.register(
        Registration(
            instance_id="prefill-0",
            role="prefill",
            engine_id="prefill-0",
            model_name="m",
            node_manager_url="http://127.0.0.1:1",
            endpoints=[Endpoint(host="127.0.0.1", port=2)],
            engine_state="starting",
        ),
        now=0.0,
    )
    registry.heartbeat(
        Heartbeat(
            instance_id="prefill-0", engine_state="crash_looping", engine_restarts=2, engine_failure="why"
        ),
        now=1.0,
    )
    (view,) = registry.views(now=1.0)
    assert (view.instance.status, view.engine_state, view.engine_failure) == (
        "inactive",
        "crash_looping",
        "why",
    )
    registry.heartbeat(Heartbeat(instance_id="prefill-0", engine_state="healthy", engine_restarts=2), now=2.0)
    (view,) = registry.views(now=2.0)
    assert (view.instance.status, view.engine_failure) == ("active", None)

    out = io.StringIO()
    crashing = view.model_copy(
        update={"engine_state": "crash_looping", "engine_failure": "exited with code 2"}
    )
    state = ControllerState(instances=[crashing], coordinators=[])
    Console(file=out, width=200).print(*local_status._render_instances(state, None))
    assert "crash_looping" in out.getvalue() and "prefill-0: exited with code 2" in out.getvalue()
