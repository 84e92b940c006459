"""Real vLLM (CPU build) engines started through motor: the engine server's status, greedy determinism, and
prefill/decode disaggregation with MooncakeConnector + the Mooncake pool (examples/local's connector chain).

Needs the `vllm` extra (scripts/setup_dev.sh): skipped without it, failed in CI (tests/installs.py). About
3 GB of RAM per engine.
"""

import copy
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from motor.config import load_documents
from motor.config.models import NodeManagerConfig
from motor.config.topology import RoleSpec
from motor.deploy.engines import EngineLaunchRequest, engine_spec
from motor.protocol.specs import EngineSpec
from motor.runtime.net import free_local_ports
from tests.fixtures.pool import RunningPool
from tests.installs import needs_vllm

pytestmark = [
    pytest.mark.slow,
    needs_vllm,
]

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "local"
STARTUP_TIMEOUT_S = 300.0
REQUEST_TIMEOUT_S = 120.0
ENGINE_ENV = {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "PYTHONHASHSEED": "0"}
FAILURE_LINE = re.compile(r"Error|Exception|Traceback|failed|Failed|FAILED|refused|in use")
GREEDY = {"model": "tiny", "temperature": 0, "ignore_eos": True, "return_token_ids": True}


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from motor.engine.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("models") / "tiny", seed=0)


class Engine:
    """One engine server process (the wrapper, which owns the vLLM process group)."""

    def __init__(self, launch: EngineSpec, log_path: Path, port: int, status_port: int) -> None:
        for path, content in launch.files.items():
            Path(path).write_text(content, encoding="utf-8")
        self.launch = launch
        self.log_path = log_path
        self.url = f"http://127.0.0.1:{port}"
        self.status_url = f"http://127.0.0.1:{status_port}/status"
        with log_path.open("wb") as log:
            self.process = subprocess.Popen(
                launch.argv, env={**os.environ, **launch.env}, stdout=log, stderr=subprocess.STDOUT
            )

    def status(self) -> str | None:
        try:
            return httpx.get(self.status_url, timeout=2).json()["status"]
        except httpx.HTTPError:
            return None

    def wait_normal(self) -> list[str]:
        """Poll /status until `normal`; return the distinct statuses seen, in order."""
        seen: list[str] = []
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            status = self.status()
            if status is not None and (not seen or seen[-1] != status):
                seen.append(status)
            if status == "normal":
                return seen
            if self.process.poll() is not None:
                pytest.fail(f"engine server exited with {self.process.returncode}: {self.failure_report()}")
            time.sleep(0.5)
        pytest.fail(
            f"engine not normal within {STARTUP_TIMEOUT_S:.0f} s (seen {seen}): {self.failure_report()}"
        )

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        response = httpx.post(f"{self.url}/v1/completions", json=body, timeout=REQUEST_TIMEOUT_S)
        assert response.status_code == 200, f"{response.status_code} {response.text}\n{self.log_tail()}"
        return response.json()

    def greedy_tokens(self, prompt: list[int], max_tokens: int = 16, **extra: Any) -> list[int]:
        choice = self.complete({**GREEDY, "prompt": prompt, "max_tokens": max_tokens, **extra})["choices"][0]
        return choice["token_ids"]

    def metric(self, name: str, label: str) -> float:
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        values = [
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(name) and label in line
        ]
        return sum(values)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        return self.process.returncode

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def failure_report(self) -> str:
        """The log's first error lines on the message's first line (the one pytest's summary shows), then all
        error lines and the log's tail."""
        lines = self.log_path.read_text(errors="replace").splitlines()
        errors = [line.strip() for line in lines if FAILURE_LINE.search(line)]
        return (
            " | ".join(errors[:3])
            + "\nerror lines:\n"
            + "\n".join(errors[:30])
            + "\n--- log tail:\n"
            + ("\n".join(lines[-40:]))
        )


@pytest.fixture
def engines() -> Iterator[list[Engine]]:
    started: list[Engine] = []
    yield started
    for engine in started:
        engine.stop()


def prompts(count: int, length: int, seed: int) -> list[list[int]]:
    import random

    rng = random.Random(seed)
    return [[rng.randrange(3, 512) for _ in range(length + 8 * i)] for i in range(count)]


def hf_greedy(model_dir: Path, prompt: list[int], steps: int) -> list[int]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, local_files_only=True).eval()
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(steps):
            logits = model(torch.tensor([ids])).logits[0, -1]
            ids.append(int(logits.argmax()))
    return ids[len(prompt) :]


def live_group_members(pgid: int) -> list[int]:
    """Processes of a process group that are not zombies (exited, waiting for a parent to reap them)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, pgrp = fields[0], int(fields[2])
        if pgrp == pgid and state != "Z":
            members.append(int(entry.name))
    return members


def wait_group_gone(pgid: int, timeout_s: float = 15.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while (members := live_group_members(pgid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return members


def test_engine_server_status_and_greedy_determinism(
    tiny_model: Path, tmp_path: Path, engines: list[Engine]
) -> None:
    port, status_port = free_local_ports(2)
    spec = RoleSpec(
        role="union",
        section_path="motor_engine_union_config",
        instances=1,
        pods_per_instance=1,
        accelerators_per_pod=0,
        engine_type="vllm",
        engine_config={
            "model": str(tiny_model),
            "served_model_name": "tiny",
            "max_model_len": 512,
            "max_num_seqs": 4,
            "dtype": "float32",
            "seed": 0,
            "enforce_eager": True,
        },
        env={**ENGINE_ENV, "VLLM_CPU_OMP_THREADS_BIND": "0"},
        node_manager=NodeManagerConfig(),
    )
    launch = engine_spec(
        EngineLaunchRequest(
            spec,
            instance_id="union-0",
            host="127.0.0.1",
            port=port,
            status_port=status_port,
            store_config=None,
            run_dir=str(tmp_path),
            python=sys.executable,
        )
    )
    engine = Engine(launch, tmp_path / "engine.log", port, status_port)
    engines.append(engine)

    assert engine.wait_normal() == ["initial", "normal"]

    prompt = prompts(1, 24, seed=3)[0]
    first = engine.greedy_tokens(prompt)
    assert len(first) == 16
    assert all(engine.greedy_tokens(prompt) == first for _ in range(3))
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(lambda _: engine.greedy_tokens(prompt), range(4))) == [first] * 4
    assert first == hf_greedy(tiny_model, prompt, 16), (
        "vLLM's greedy tokens differ from transformers' reference"
    )
    other = prompts(1, 24, seed=4)[0]
    assert engine.greedy_tokens(other) != first, (
        "the tiny model must answer differently to a different context"
    )

    engine_pid = next(
        int(line.split("pid ")[1].split(")")[0])
        for line in engine.log_tail(400).splitlines()
        if "engine started (pid" in line
    )
    assert live_group_members(engine_pid), "the engine runs in its own process group"
    assert engine.stop() in (0, 128 + signal.SIGTERM)
    assert wait_group_gone(engine_pid) == [], "the engine's process group outlived the engine server"


# ---- prefill/decode with MooncakeConnector + MooncakeStoreConnector --------------------------------------------


def pd_topology(tiny_model: Path, pool: RunningPool, kv_port: int) -> Any:
    user = json.loads((EXAMPLE / "user_config.json").read_text())
    env = json.loads((EXAMPLE / "env.json").read_text())
    for section in ("motor_engine_prefill_config", "motor_engine_decode_config"):
        config = user[section]["engine_config"]
        config["model"] = str(tiny_model)
        config["max_model_len"] = 512
        config["kv_transfer_config"]["kv_connector_extra_config"]["connectors"][0]["kv_port"] = str(kv_port)
    user["kv_cache_pool_config"].update(
        {
            "port": pool.pool.port,
            "metrics_port": pool.pool.metrics_port,
            "global_segment_size": pool.pool.global_segment_size,
            "local_buffer_size": pool.pool.local_buffer_size,
        }
    )
    return load_documents(copy.deepcopy(user), env)


def test_pd_decode_equals_aggregated_with_kv_from_transfer(
    tiny_model: Path, tmp_path: Path, engines: list[Engine], mooncake_master: RunningPool
) -> None:
    p_port, p_status, d_port, d_status, kv_port = free_local_ports(5)
    topology = pd_topology(tiny_model, mooncake_master, kv_port)
    launches = {}
    for role, port, status_port in (("prefill", p_port, p_status), ("decode", d_port, d_status)):
        launch = engine_spec(
            EngineLaunchRequest(
                topology.roles[role],
                instance_id=f"{role}-0",
                host="127.0.0.1",
                port=port,
                status_port=status_port,
                store_config=mooncake_master.store_config,
                run_dir=str(tmp_path),
                python=sys.executable,
            )
        )
        launches[role] = launch
        engines.append(Engine(launch, tmp_path / f"{role}.log", port, status_port))
    prefill, decode = engines
    assert launches["prefill"].bootstrap_port == kv_port and launches["decode"].bootstrap_port is None
    for engine in engines:
        engine.wait_normal()

    batch = prompts(6, 64, seed=11)
    external = ("vllm:prompt_tokens_by_source_total", 'source="external_kv_transfer"')
    before = decode.metric(*external)
    aggregated = [decode.greedy_tokens(prompt, max_tokens=24) for prompt in batch]
    assert decode.metric(*external) == before, "without kv_transfer_params the decode engine computes locally"

    def disaggregated(prompt: list[int]) -> list[int]:
        transfer_id = str(uuid.uuid4())
        prefill_params = {"do_remote_decode": True, "do_remote_prefill": False, "transfer_id": transfer_id}
        decode_params = {
            "do_remote_prefill": True,
            "do_remote_decode": False,
            "transfer_id": transfer_id,
            "remote_engine_id": "prefill-0",
            "remote_bootstrap_addr": f"http://127.0.0.1:{launches['prefill'].bootstrap_port}",
        }
        with ThreadPoolExecutor(2) as legs:
            prefill_leg = legs.submit(prefill.greedy_tokens, prompt, 1, kv_transfer_params=prefill_params)
            decode_leg = legs.submit(decode.greedy_tokens, prompt, 24, kv_transfer_params=decode_params)
            prefill_leg.result()
            return decode_leg.result()

    for prompt, expected in zip(batch, aggregated, strict=True):
        assert disaggregated(prompt) == expected
    transferred = decode.metric(*external) - before
    full_blocks = sum((len(prompt) - 1) // 32 * 32 for prompt in batch)
    assert transferred >= full_blocks > 0, (
        f"decode got {transferred} prompt tokens by transfer, expected ≥ {full_blocks}"
    )
