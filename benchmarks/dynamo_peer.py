"""NVIDIA Dynamo 1.6.1 as a benchmark peer: its OpenAI frontend (KV router, request migration) in front of its
mocker workers, timed like motor's capacity-model sim engines.

Dynamo comes from its own virtual environment (`.venv-dynamo`, made by scripts/install_dynamo.sh), never from
motor's. Everything runs with file discovery and the ZMQ event plane (no etcd, no NATS). Dynamo advertises the
addresses in DYN_EVENT_PLANE_HOST, DYN_TCP_RPC_HOST, DYN_TCP_RESPONSE_STREAM_HOST and DYN_SYSTEM_HOST (set to
127.0.0.1 here), but its ZMQ publishers bind 0.0.0.0 whatever they advertise; so a benchmark that starts
Dynamo runs in a network namespace of its own whose only interface is loopback (`enter_loopback_namespace`):
nothing it starts can be reached from, or reach, beyond 127.0.0.1.

Calibration (`perf_tables`): the mocker times a forward pass from two tables it interpolates (its
`--planner-profile-data` NPZ): prefill milliseconds by the new prompt tokens of the pass, and decode
milliseconds by (the active KV tokens, their mean context length). The tables are filled from a motor
`CapacityModel`, so a pass costs what the sim's step costs for the same work:

    prefill ms(t) = t / (prefill_tokens_per_s × r) × 1000
    decode ms(x, c) = step_overhead_ms + decode_ms_per_seq × max(1, x / c)
                      + decode_ms_per_1k_context × x / r / 1000

where r is the mocker tokenizer's tokens per sim token (the mocker tokenizes the prompt text with the model
directory's tokenizer, the sim counts one token per word), so costs, KV budgets and block counts are matched
per word of prompt. The mocker interpolates the decode table bilinearly: on a geometric grid of 200 nodes
shared by both axes it stays within a few per cent of the formula (tests/unit/test_dynamo_peer.py).
"""

import json
import math
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator_overhead import Process, free_port, spawn, wait_http

from motor.engine.sim.capacity import CapacityModel

REPO = Path(__file__).resolve().parents[1]
DYNAMO_VENV = REPO / ".venv-dynamo"
DYNAMO_VERSION = "1.6.1"
NAMESPACE_MARKER = "MOTOR_BENCH_LOOPBACK_NETNS"  # set in the re-executed benchmark, inside its namespace
LOOPBACK_ENV = {
    "DYN_EVENT_PLANE_HOST": "127.0.0.1",
    "DYN_TCP_RPC_HOST": "127.0.0.1",
    "DYN_TCP_RESPONSE_STREAM_HOST": "127.0.0.1",
    "DYN_SYSTEM_HOST": "127.0.0.1",
    "HF_HUB_OFFLINE": "1",  # the tokenizer comes from the model directory, never a hub
}
PREFILL_POINTS = 64
DECODE_POINTS = 200


# ---- the network namespace -------------------------------------------------------------------------------


def enter_loopback_namespace() -> None:
    """Re-execute this benchmark in a new network namespace whose loopback is up and which has no other
    interface (needs root and util-linux's `unshare`). Returns only inside the namespace."""
    if os.environ.get(NAMESPACE_MARKER) == "1":
        return
    unshare, ip = shutil.which("unshare"), shutil.which("ip")
    if os.geteuid() != 0 or unshare is None or ip is None:
        raise SystemExit(
            "Dynamo's ZMQ publishers bind 0.0.0.0, so its benchmarks run in a loopback-only network "
            "namespace: run them as root on a host with `unshare` (util-linux) and `ip` (iproute2)"
        )
    os.environ[NAMESPACE_MARKER] = "1"
    script = f'{ip} link set lo up && exec "$0" "$@"'
    os.execv(unshare, [unshare, "--net", "--", "sh", "-c", script, sys.executable, *sys.argv])


# ---- the installation and the model directory --------------------------------------------------------------


def dynamo_python() -> Path:
    python = DYNAMO_VENV / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"Dynamo is not installed in {DYNAMO_VENV}: run scripts/install_dynamo.sh")
    return python


def dynamo_versions() -> str:
    script = "from importlib.metadata import version as v; print(v('ai-dynamo'), v('ai-dynamo-runtime'))"
    out = subprocess.run([str(dynamo_python()), "-c", script], capture_output=True, text=True, check=True)
    dynamo, runtime = out.stdout.split()
    return f"ai-dynamo {dynamo}, ai-dynamo-runtime {runtime}"


def tiny_model_dir(work: Path, max_model_len: int) -> Path:
    """`motor model tiny` written to `work`/tiny-model (the mocker needs a tokenizer and a config), its
    context raised to `max_model_len` so the frontend accepts the benchmark's longest prompt (no weights are
    used)."""
    directory = work / "tiny-model"
    motor_cli = Path(sys.executable).parent / "motor"
    subprocess.run([str(motor_cli), "model", "tiny", str(directory)], check=True, capture_output=True)
    for name, key in (
        ("config.json", "max_position_embeddings"),
        ("tokenizer_config.json", "model_max_length"),
    ):
        path = directory / name
        config = json.loads(path.read_text())
        config[key] = max_model_len
        path.write_text(json.dumps(config, indent=2))
    return directory


def tokens_per_word(model_dir: Path, texts: list[str]) -> float:
    """The model directory's tokenizer's tokens per whitespace-separated word over `texts`."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokens = sum(len(tokenizer.encode(text).ids) for text in texts)
    return tokens / max(1, sum(len(text.split()) for text in texts))


# ---- calibration (pure) ------------------------------------------------------------------------------------


def decode_ms(model: CapacityModel, active_kv_tokens: float, context: float, ratio: float) -> float:
    """The sim's decode step for a batch whose contexts total `active_kv_tokens` mocker tokens, `context`
    each."""
    sequences = max(1.0, active_kv_tokens / max(context, 1.0))
    return (
        model.step_overhead_ms
        + model.decode_ms_per_seq * sequences
        + model.decode_ms_per_1k_context * active_kv_tokens / ratio / 1000.0
    )


def perf_tables(
    model: CapacityModel, ratio: float, max_prompt_tokens: int, max_kv_tokens: int
) -> dict[str, list[Any]]:
    """The mocker's timing tables (the keys of its NPZ) for engines timed like `model`, `ratio` mocker tokens
    per sim token; prompts up to `max_prompt_tokens` and batches up to `max_kv_tokens` (mocker tokens) are on
    the grid, beyond that the mocker extrapolates linearly."""
    per_token_ms = 1000.0 / (model.prefill_tokens_per_s * ratio) if model.prefill_tokens_per_s > 0 else 0.0
    isl = [max_prompt_tokens * i / (PREFILL_POINTS - 1) for i in range(PREFILL_POINTS)]
    # one geometric set of nodes on both decode axes: the batch size x / c bends where x = c, a grid diagonal
    growth = max_kv_tokens ** (1 / (DECODE_POINTS - 1))
    nodes = sorted({round(growth**i, 6) for i in range(DECODE_POINTS)})
    kv = [0.0, *nodes]
    return {
        "prefill_isl": isl,
        "prefill_ttft_ms": [t * per_token_ms for t in isl],
        "decode_active_kv_tokens": kv,
        "decode_context_length": nodes,
        "decode_itl": [[decode_ms(model, x, c, ratio) for c in nodes] for x in kv],
    }


def write_perf_data(path: Path, tables: dict[str, list[Any]]) -> Path:
    import numpy as np

    np.savez(path, **{key: np.asarray(value, dtype=np.float64) for key, value in tables.items()})
    return path


# ---- processes ---------------------------------------------------------------------------------------------


def free_system_port() -> int:
    """A free loopback port below 32768: Dynamo reads DYN_SYSTEM_PORT as a signed 16-bit integer."""
    for port in random.Random().sample(range(20000, 32768), 200):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below 32768 on 127.0.0.1")


@dataclass
class Mocker:
    """One mocker process (`workers` workers in it) and its system status port (its /metrics)."""

    process: Process
    system_port: int
    workers: int

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.system_port}/metrics", timeout=5) as response:
            return response.read().decode()

    def inflight(self) -> float:
        """Requests its workers are serving now (generate endpoint)."""
        total = 0.0
        for line in self.metrics().splitlines():
            if (
                line.startswith("dynamo_component_inflight_requests{")
                and 'dynamo_endpoint="generate"' in line
            ):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def kill(self) -> float:
        """SIGKILL the process; the instant (time.perf_counter) of the kill."""
        os.kill(self.process.popen.pid, signal.SIGKILL)
        killed_at = time.perf_counter()
        self.process.popen.wait(timeout=10)
        return killed_at


def dynamo_env(discovery_dir: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**LOOPBACK_ENV, "DYN_FILE_KV": str(discovery_dir), **(extra or {})}


def start_mocker(
    work: Path, name: str, model_dir: Path, served_name: str, flags: list[str], workers: int = 1
) -> Mocker:
    system_port = free_system_port()
    args = [
        str(dynamo_python()), "-m", "dynamo.mocker", "--model-path", str(model_dir),
        "--model-name", served_name, "--discovery-backend", "file", "--num-workers", str(workers), *flags,
    ]  # fmt: skip
    env = dynamo_env(work / "discovery", {"DYN_SYSTEM_PORT": str(system_port), "DYN_LOG": "warn"})
    process = spawn(name, args, system_port, work, env=env)
    try:
        wait_http(process, f"http://127.0.0.1:{system_port}/metrics", timeout_s=120)
    except BaseException:
        process.stop()
        raise
    return Mocker(process, system_port, workers)


def mocker_flags(
    model: CapacityModel, ratio: float, blocks: int, perf_data: Path, max_num_seqs: int, extra: list[str]
) -> list[str]:
    """Flags of a mocker whose KV budget is `blocks` sim blocks (× `ratio` mocker blocks of 16 tokens), its
    token budget per pass the sim's (× `ratio`), timed by `perf_data`."""
    return [
        "--block-size", "16", "--num-gpu-blocks-override", str(math.ceil(blocks * ratio)),
        "--max-num-batched-tokens", str(math.ceil(model.max_num_batched_tokens * ratio)),
        "--max-num-seqs", str(max_num_seqs), "--planner-profile-data", str(perf_data),
        "--preemption-mode", "lifo", *extra,
    ]  # fmt: skip


def role_flags(model: CapacityModel, ratio: float, role: str, workers: int = 1) -> list[str]:
    """The mocker flags of a role: `agg` (aggregated), or `prefill` / `decode` of a disaggregated pair, whose
    KV moves from prefill to decode over a link timed as the sim's (bandwidth and bytes per sim token; the
    sim's fixed per-transfer latency has no mocker counterpart). A prefill process gets a bootstrap port per
    worker, where its decode workers fetch the KV."""
    if role == "agg":
        return []
    flags = [
        "--disaggregation-mode", role, "--kv-transfer-bandwidth", f"{model.kv_link_gb_per_s:g}",
        "--kv-bytes-per-token", str(round(model.kv_transfer_bytes_per_token / ratio)),
    ]  # fmt: skip
    if role == "prefill":
        flags += ["--bootstrap-ports", ",".join(str(free_port()) for _ in range(workers))]
    return flags


def start_frontend(work: Path, name: str, flags: list[str]) -> Process:
    port = free_port()
    args = [
        str(dynamo_python()), "-m", "dynamo.frontend", "--http-host", "127.0.0.1", "--http-port", str(port),
        "--discovery-backend", "file", *flags,
    ]  # fmt: skip
    process = spawn(name, args, port, work, env=dynamo_env(work / "discovery", {"DYN_LOG": "warn"}))
    try:
        wait_http(process, f"http://127.0.0.1:{port}/health", timeout_s=120)
    except BaseException:
        process.stop()
        raise
    return process


_WORKER_EVENT = re.compile(r"(Adding|Removing) worker WorkerWithDpRank \{ worker_id: (\d+)")


def frontend_workers(frontend: Process) -> tuple[set[int], set[int]]:
    """(workers the frontend's router added, workers it removed), from its log (it logs both at WARN)."""
    added: set[int] = set()
    removed: set[int] = set()
    for kind, worker in _WORKER_EVENT.findall(frontend.log.read_text(errors="replace")):
        (added if kind == "Adding" else removed).add(int(worker))
    return added, removed


def wait_workers(frontend: Process, started: int, live: int, timeout_s: float = 120.0) -> None:
    """Until the frontend's router has added `started` workers in all (every mocker worker started so far) and
    routes to `live` of them (a killed worker is removed once its discovery entry expires)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if frontend.popen.poll() is not None:
            raise RuntimeError(f"{frontend.name} exited:\n{frontend.log.read_text()[-3000:]}")
        added, removed = frontend_workers(frontend)
        if len(added) >= started and len(added - removed) == live:
            return
        time.sleep(0.2)
    added, removed = frontend_workers(frontend)
    raise RuntimeError(
        f"{frontend.name}: {len(added)} workers added, {len(added - removed)} live after {timeout_s:g} s "
        f"(wanted {started} added, {live} live)"
    )


# ---- a whole Dynamo deployment of mocker workers -----------------------------------------------------------


NVEXT_TOKEN_EVENTS = {"nvext": {"extra_fields": ["completion_token_ids"]}}
"""Request field that makes the frontend stream one event per token: the mocker's random token ids decode to
no text, and the frontend coalesces events without text (and would send one event per answer)."""


@dataclass
class DynamoDeployment:
    """A frontend and its disaggregated mocker processes: one of prefill workers, one of decode workers."""

    frontend: Process
    mockers: list[Mocker]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.frontend.port}"

    def pids(self) -> list[int]:
        return [mocker.process.popen.pid for mocker in self.mockers]

    def counters(self) -> tuple[dict[str, float], dict[str, float]]:
        """(prefill side, decode side) in the keys of cluster_scheduling's engine counters, from the router's
        own accounting: prompt tokens it placed and the prefix it found cached on the chosen worker (its index
        of the workers' KV events); the pool and the prefill→decode handover have no router figure (NaN)."""
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=10) as response:
            text = response.read().decode()
        prompt = local = 0.0
        for line in text.splitlines():
            if 'phase="prefill"' not in line:  # the decode leg is routed too, with the same input
                continue
            if line.startswith("dynamo_component_router_input_sequence_tokens_sum{"):
                prompt += float(line.rsplit(" ", 1)[1])
            elif line.startswith("dynamo_component_router_kv_selected_cached_prefix_tokens_total{"):
                local += float(line.rsplit(" ", 1)[1])
        prefill = {"prompt": prompt, "local": local, "pool": 0.0, "running": 0.0, "waiting": 0.0}
        decode = {"prompt": 1.0, "handover": math.nan, "running": 0.0, "waiting": 0.0}
        return prefill, decode

    def stop(self) -> None:
        for process in [self.frontend, *(mocker.process for mocker in self.mockers)]:
            process.stop()


def start_deployment(
    work: Path,
    *,
    engines: int,
    router_mode: str,
    model_dir: Path,
    served_name: str,
    flags_of: Callable[[str], list[str]],
) -> DynamoDeployment:
    """`engines` prefill and `engines` decode workers, each role's flags from `flags_of(role)`, behind a
    frontend that routes with `router_mode`; returns once the frontend routes to every worker."""
    directory = work / f"dynamo-{router_mode}-{free_port()}"
    directory.mkdir(parents=True)
    roles = ["prefill", "decode"]
    mockers: list[Mocker] = []
    try:
        for role in roles:
            flags = flags_of(role)
            mockers.append(start_mocker(directory, f"mocker-{role}", model_dir, served_name, flags, engines))
        frontend = start_frontend(directory, "frontend", ["--router-mode", router_mode])
    except BaseException:
        for mocker in mockers:
            mocker.process.stop()
        raise
    deployment = DynamoDeployment(frontend, mockers)
    try:
        wait_workers(frontend, engines * len(roles), engines * len(roles))
    except BaseException:
        deployment.stop()
        raise
    return deployment
