"""Replay on the real engine: a copy of examples/local with 1 prefill and 2 decode vLLM CPU engines and
`reschedule_config` on, deployed by `motor deploy`. A greedy stream whose decode engine is SIGKILLed mid-answer
goes on through the other decode (prompt + the tokens already sent, prefilled again and handed over by
MooncakeConnector) and must equal, token for token, the same request left alone.

The module starts 3 engines once (about 9 GB, 60–90 s on 2 cores); the kill test runs last.
"""

import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import pytest

from motor.config import load_config
from motor.config.ports import instance_ports
from tests.fixtures.control import pid_alive
from tests.fixtures.coordinator import metric_at
from tests.fixtures.local_example import (
    build_tiny_model,
    deployed,
    engine_api_server_pid,
    write_local_example,
)
from tests.installs import needs_vllm

pytestmark = [pytest.mark.slow, needs_vllm]

MODEL_DIR = ".motor/models/tiny"
JOB_ID = "motor-replay-vllm"
# CPU engines are slow to give a first token: the example's own first_token_timeout (120 s) stays.
REPLAY = {"max_retry": 3, "retry_delay": 0.2, "reschedule_config": {"enable": True}}
RESUMED = 'motor_coordinator_replays_total{outcome="resumed"}'
PROMPT = [(7 * i) % 500 + 3 for i in range(96)]
BODY = {
    "model": "tiny",
    "prompt": PROMPT,
    "max_tokens": 160,
    "temperature": 0,
    "ignore_eos": True,
    "return_token_ids": True,
    "stream": True,
    "stream_options": {"include_usage": True},
}
KILL_AFTER = 40  # output events before the decode engine is killed


@dataclass(frozen=True)
class Deployment:
    run_root: Path
    api_url: str
    mgmt_url: str
    decodes: dict[str, str]  # decode instance → engine base URL

    def streaming_decode(self) -> str | None:
        for name, url in self.decodes.items():
            if metric_at(url, "vllm:num_requests_running"):
                return name
        return None


@dataclass
class Received:
    token_ids: list[int] = field(default_factory=list)
    output_at: list[float] = field(default_factory=list)  # when each output event arrived
    errors: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    done: bool = False
    killed: str | None = None
    killed_pid: int = 0
    killed_at: float | None = None


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    root = tmp_path_factory.mktemp("replay-vllm")
    log_path = root / "motor-cli.log"
    build_tiny_model(root, MODEL_DIR, log_path)
    config_dir = write_local_example(root / "config", JOB_ID, prefills=1, decodes=2)
    user_path = config_dir / "user_config.json"
    user = json.loads(user_path.read_text())
    user["motor_coordinator_config"]["exception_config"].update(REPLAY)
    user_path.write_text(json.dumps(user, indent=2))
    topology = load_config(user_path, config_dir / "env.json")
    api = topology.user.motor_coordinator_config.api_config
    run_root = root / "run"
    deploy = Deployment(
        run_root=run_root,
        api_url=f"http://127.0.0.1:{api.coordinator_api_infer_port}",
        mgmt_url=f"http://127.0.0.1:{api.coordinator_api_mgmt_port}",
        decodes={
            p.name: f"http://127.0.0.1:{p.engine_port}"
            for p in instance_ports(topology.roles)
            if p.role == "decode"
        },
    )
    with deployed(root, config_dir, run_root, JOB_ID, log_path):
        yield deploy


def stream(deploy: Deployment, kill_after: int | None = None) -> Received:
    """The whole stream of BODY through the coordinator; with `kill_after`, the decode engine serving it is
    SIGKILLed once that many output events arrived. Every read is bounded, so a silent stream fails the test."""
    received = Received()
    timeout = httpx.Timeout(connect=10, read=150, write=10, pool=10)
    with httpx.stream("POST", f"{deploy.api_url}/v1/completions", json=BODY, timeout=timeout) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                received.done = True
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                received.errors.append(chunk["error"])
            received.usage = chunk.get("usage") or received.usage
            ids = [t for choice in chunk.get("choices", []) for t in choice.get("token_ids") or []]
            if not ids:
                continue
            received.token_ids += ids
            received.output_at.append(time.monotonic())
            if kill_after is not None and received.killed is None and len(received.output_at) >= kill_after:
                received.killed = deploy.streaming_decode()
                assert received.killed is not None, "no decode engine was running the request"
                port = int(deploy.decodes[received.killed].rsplit(":", 1)[1])
                received.killed_pid = engine_api_server_pid(deploy.run_root, JOB_ID, received.killed, port)
                os.kill(received.killed_pid, signal.SIGKILL)
                received.killed_at = time.monotonic()
    return received


def test_a_greedy_stream_whose_decode_engine_dies_goes_on_token_for_token(deployment: Deployment) -> None:
    undisturbed = stream(deployment)
    assert undisturbed.done and not undisturbed.errors
    assert len(undisturbed.token_ids) == BODY["max_tokens"]
    resumed_before = metric_at(deployment.mgmt_url, RESUMED)

    replayed = stream(deployment, kill_after=KILL_AFTER)

    assert replayed.killed is not None and replayed.killed_at is not None, "the stream ended before the kill"
    assert replayed.done and not replayed.errors, replayed.errors
    assert replayed.token_ids == undisturbed.token_ids
    assert replayed.usage is not None and replayed.usage["completion_tokens"] == BODY["max_tokens"]
    assert replayed.usage["prompt_tokens"] == len(PROMPT)
    assert metric_at(deployment.mgmt_url, RESUMED) == resumed_before + 1
    arrived = replayed.output_at
    gaps = [b - a for a, b in pairwise(arrived) if b > replayed.killed_at]
    undisturbed_gap = max(b - a for a, b in pairwise(undisturbed.output_at))
    log = (deployment.run_root / JOB_ID / "logs" / "coordinator.log").read_text(errors="replace")
    replays = [line.split(": ", 2)[-1] for line in log.splitlines() if "replaying" in line]
    assert len(replays) == 1, replays
    # How long the client waited is printed, not asserted (timing belongs in benchmarks/).
    print(
        f"decode {replayed.killed} killed after {sum(t <= replayed.killed_at for t in arrived)} output events; "
        f"longest gap between events after the kill {max(gaps):.2f} s (undisturbed stream: {undisturbed_gap:.2f} s); coordinator: {replays[0]}"
    )
    # A big multi-threaded process can still be tearing down (its sockets already closed) when the stream ends.
    gone_by = time.monotonic() + 10
    while pid_alive(replayed.killed_pid) and time.monotonic() < gone_by:
        time.sleep(0.1)
    assert not pid_alive(replayed.killed_pid), "the decode engine survived the kill"
