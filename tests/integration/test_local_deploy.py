"""examples/sim deployed by the local backend (real mooncake_master, controller, coordinator, node managers,
sim engines): PD requests whose KV the decode engine receives from the prefill (every dispatch profile),
status, a refused second deploy, and a stop that leaves nothing."""

import io
import re
import threading
import time
from collections.abc import Callable
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import httpx
import pytest

from motor.cli import local_job, local_status
from motor.pool.metrics import scrape_pool
from motor.runtime.net import free_port_block
from motor.runtime.processes import start_ticks
from tests.fixtures.control import LocalRun
from tests.fixtures.coordinator import metric_at
from tests.fixtures.kv_handover import assert_kv_handover, decode_counters
from tests.fixtures.waits import wait_equal

PROMPT = " ".join(f"word{i}" for i in range(200))
BLOCK_SIZE = 16  # examples/sim's block_size
# The transfer connector (connectors[0] of the example's MultiConnector) that selects each other profile.
TRANSFER_CONNECTORS = {"decode_first": "MooncakeLayerwiseConnector", "concurrent": "MooncakeConnector"}


def decode_url(run: LocalRun) -> str:
    """decode-0's engine, as the coordinator has it registered."""
    instances = httpx.get(f"{run.mgmt_url}/instances", timeout=10).json()["instances"]
    (endpoint,) = next(i for i in instances if i["id"] == "decode-0")["endpoints"]
    return f"http://{endpoint['host']}:{endpoint['port']}"


def serve_and_check_handover(run: LocalRun, requests: int = 3) -> None:
    """Chat requests with fresh prompts through the coordinator; the decode engine got their KV by transfer."""
    decode = decode_url(run)
    before = decode_counters(decode)
    prompt_tokens = []
    with httpx.Client(base_url=run.api_url, timeout=60) as client:
        for index in range(requests):
            response = client.post(
                "/v1/chat/completions",
                json={
                    "model": "sim-model",
                    "messages": [{"role": "user", "content": f"{index} {PROMPT}"}],
                    "max_tokens": 8,
                },
            )
            assert response.status_code == 200, response.text
            assert response.json()["usage"]["completion_tokens"] == 8
            prompt_tokens.append(response.json()["usage"]["prompt_tokens"])
    assert_kv_handover(before, decode_counters(decode), prompt_tokens, BLOCK_SIZE)


def transfer_override(profile: str) -> dict[str, Any]:
    """examples/sim with another transfer connector in front of the pool connector."""
    sections = {}
    for section, kv_role in (
        ("motor_engine_prefill_config", "kv_producer"),
        ("motor_engine_decode_config", "kv_consumer"),
    ):
        connectors = [
            {"kv_connector": TRANSFER_CONNECTORS[profile], "kv_role": kv_role},
            {"kv_connector": "MooncakeStoreConnector", "kv_role": kv_role},
        ]
        sections[section] = {
            "engine_config": {"kv_transfer_config": {"kv_connector_extra_config": {"connectors": connectors}}}
        }
    return sections


COMPLETION = {"model": "sim-model", "prompt": PROMPT, "max_tokens": 4}


def coordinator_requests(run: LocalRun) -> float:
    """Client requests the coordinator answered (its requests_total over every route and status)."""
    return metric_at(run.mgmt_url, "motor_coordinator_requests_total")


class OneCompletionPerPause:
    """Stands in for the `time` module of motor/cli/local_status.py: before each pause between two
    frames one completion goes through the coordinator, and the pause begins once the coordinator counted
    it (it counts a request after answering it), so the next frame's window holds that request however
    slow the machine is."""

    def __init__(self, run: LocalRun) -> None:
        self.run = run

    def sleep(self, seconds: float) -> None:
        counted = coordinator_requests(self.run)
        response = httpx.post(f"{self.run.api_url}/v1/completions", json=COMPLETION, timeout=60)
        assert response.status_code == 200, response.text
        wait_equal(lambda: coordinator_requests(self.run), counted + 1, "the coordinator's request count")
        time.sleep(seconds)

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (engine servers, engines, coordinator workers ...)."""
    try:
        children = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []
    return children + [grandchild for child in children for grandchild in descendants(child)]


@pytest.mark.slow
def test_deploy_serve_status_refuse_and_stop(
    local_run: Callable[..., LocalRun], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    run = local_run()
    assert run.plan_and_deploy() == 0
    shown = capsys.readouterr().out
    assert f"endpoint: {run.api_url}/v1" in shown and "curl" in shown

    serve_and_check_handover(run)  # prefill_first: the example's MooncakeConnectorV1
    # the prefill engine wrote the prompt's KV blocks into the pool, the decode engine read them from there
    pool = scrape_pool(run.state()["pool_metrics_url"])
    assert pool.put_requests > 0 and pool.get_hits > 0

    output = io.StringIO()
    with redirect_stdout(output):
        assert local_status.status(run.run_root, run.job_id, out=output) == 0
    table = output.getvalue()
    for line in ("prefill-0  prefill  active  healthy", "decode-0   decode   active  healthy", "KV pool:"):
        assert line in table, table
    assert "coordinator" in table and "ready: true" in table
    assert re.search(r"prefill\s+0\s+1\s+0", table) and re.search(r"decode\s+0\s+1\s+0", table), table
    assert local_status.status(run.run_root, None, out=io.StringIO()) == 0  # every job under the run root

    # --watch: the second frame shows the traffic between the two scrapes
    wait_equal(lambda: coordinator_requests(run), 3, "the coordinator's count of the chats")
    watched = io.StringIO()
    with monkeypatch.context() as patch:
        patch.setattr(local_status, "time", OneCompletionPerPause(run))
        assert local_status.watch(run.run_root, run.job_id, interval=0.5, out=watched, frames=2) == 0
    frames = watched.getvalue()
    since_start = re.search(r"since start\s+(\d+)\s+-\s+0\s+-\s+-", frames)  # no stream yet: no TTFT
    window = re.search(r"last \d\.\d s\s+(\d+)\s+\d+\.\d\s+0\s", frames)
    assert since_start and window, frames
    assert int(since_start.group(1)) + int(window.group(1)) == 4, frames  # 3 chats, then one completion

    # logs: the coordinator's and an engine's, and a follow that sees what is appended
    logs = io.StringIO()
    assert local_job.logs(run.run_root, run.job_id, "coordinator", lines=5, out=logs) == 0
    assert 0 < len(logs.getvalue().splitlines()) <= 5
    engine = io.StringIO()
    assert local_job.logs(run.run_root, None, "decode-0", engine=True, lines=1000, out=engine) == 0
    assert "motor-sim" in engine.getvalue()
    assert local_job.logs(run.run_root, run.job_id, "no-such", out=io.StringIO()) == 2
    followed = io.StringIO()
    log_file = run.run_dir / "logs" / "controller.log"
    threading.Timer(0.5, lambda: log_file.open("a").write("appended by the test\n")).start()
    assert (
        local_job.logs(
            run.run_root, run.job_id, "controller", lines=0, follow=True, out=followed, follow_for_s=2
        )
        == 0
    )
    assert followed.getvalue() == "appended by the test\n"

    # a second deploy of the same job is refused and leaves the running one alone
    before = run.pids()
    assert run.plan_and_deploy() == 1
    assert "already running" in capsys.readouterr().err
    assert run.pids() == before

    recorded = list(before.values())
    recorded += [pid for leader in before.values() for pid in descendants(leader)]
    assert len(recorded) >= len(before) + 4  # at least an engine server and its engine per instance
    ticks = {pid: start_ticks(pid) for pid in recorded}
    assert all(ticks.values())
    assert local_job.stop(run.run_root, run.job_id) == 0
    assert [pid for pid in recorded if start_ticks(pid) == ticks[pid]] == []
    assert not (run.run_dir / "state.json").exists()
    assert local_status.status(run.run_root, run.job_id) == 1
    assert local_job.stop(run.run_root, None) == 0  # nothing left to stop


@pytest.mark.slow
@pytest.mark.parametrize("profile", sorted(TRANSFER_CONNECTORS))
def test_every_other_profile_hands_the_kv_over(
    local_run: Callable[..., LocalRun], capsys: pytest.CaptureFixture[str], profile: str
) -> None:
    run = local_run(overrides=transfer_override(profile))
    assert run.plan_and_deploy() == 0
    assert f"dispatch profile {profile}" in capsys.readouterr().out
    serve_and_check_handover(run)
    assert local_job.stop(run.run_root, run.job_id) == 0


def test_a_component_that_fails_to_start_fails_the_deploy_and_leaves_nothing(
    local_run: Callable[..., LocalRun], capsys: pytest.CaptureFixture[str]
) -> None:
    # persistence on, but nothing listens where etcd should be: the controller exits at start, after the pool
    # master is already up
    dead_port = free_port_block(1)
    run = local_run(
        overrides={
            "motor_controller_config": {
                "etcd_config": {"enable_etcd_persistence": True, "etcd_port": dead_port, "etcd_timeout": 1}
            }
        },
    )
    assert run.plan_and_deploy(ready_timeout=30) == 1
    captured = capsys.readouterr()
    pids = {
        match.group(1): int(match.group(2))
        for match in re.finditer(r"started (\S+)\s+pid (\d+)", captured.out)
    }
    err = captured.err
    assert "controller exited while starting" in err
    assert "etcd" in err  # the controller's log tail says why
    assert set(pids) == {"kv-pool"}
    assert [pid for pid in pids.values() if start_ticks(pid) is not None] == []
    assert not (run.run_dir / "state.json").exists()
    assert local_status.status(run.run_root, run.job_id) == 1
    assert local_job.stop(run.run_root, None) == 0  # nothing left to stop
