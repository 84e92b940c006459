"""An engine that exits during every start fails `motor deploy` at once with the reason — crash_looping, its exit
code and the last lines of its log — instead of a wait until the deploy's timeout; nothing is left running."""

import pytest

from tests.fixtures.control import LocalRun

# a flag the simulator's parser takes (so `motor validate` lets it through), naming a file that is not there:
# the engine exits at every start
MISSING_STORE_CONFIG = {
    "motor_engine_prefill_config": {"engine_config": {"store_config": "/nonexistent/store.json"}}
}


def test_an_engine_that_exits_at_every_start_is_a_crash_loop_the_deploy_reports(
    local_run, capsys: pytest.CaptureFixture[str]
) -> None:
    run: LocalRun = local_run(pool=False, overrides=MISSING_STORE_CONFIG)
    code = run.plan_and_deploy(ready_timeout=300)
    err = capsys.readouterr().err
    assert code != 0
    assert "prefill-0: its engine keeps exiting during its start (crash loop" in err, err
    assert "exited with code 1 before it became healthy, 2 starts in a row" in err, err
    assert "cannot read the store config /nonexistent/store.json" in err, "the log's last lines are shown"
    assert "not ready within" not in err, "it waited for the timeout"
    assert not (run.run_dir / "state.json").exists(), "the failed job was not stopped"
