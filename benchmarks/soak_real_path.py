"""Soak the real PD path: a bounded mix of requests through a copy of examples/local with 2 prefill instances.

The copy (like tests/integration/test_e2e_vllm.py's) is examples/local with free ports, its own job id,
`p_instances_num` 2 and the example's tiny model built on the spot (`motor model tiny`): vLLM CPU engines with
MultiConnector[MooncakeConnector (tcp), MooncakeStoreConnector], a real mooncake_master, the controller and the
coordinator (dispatch profile concurrent). Three engines on the machine's cores.

The mix: `--requests` streamed completions of `--output-tokens` greedy tokens, prompts of `--min-prompt` to
`--max-prompt` random token ids; a share (`--repeat-share`) reuses a whole-block prefix of an earlier prompt with
a fresh tail, so their KV can come from the pool (prefix caching is off in the example: a cached token is a pool
hit). The requests go in blocks of `--block` that alternate sequential (one client) and concurrent
(`--concurrency` clients). Each request carries `X-Request-Id: soak-<n>` to find it in the logs.

Printed: requests, errors, the coordinator's retries and cancelled legs (its /metrics, by reason), TTFT and
end-to-end P50/P99/max, the longest gap between two output events of one stream, requests slower than
`--slow-seconds`, pool hits (requests with cached tokens, and the master's get hits), the load average during the
run, and the CPU time each deployed process (per instance: API server, EngineCore, worker) and everything else on
the machine used while the requests ran. `--dump-after S` records `ss`, every engine thread's state, gdb's
stacks of every EngineCore thread (when gdb is installed) and `py-spy dump --native` of every engine process when
a request has been in flight S seconds (once per request; py-spy must be installed) and keeps the dumps.

    .venv/bin/python benchmarks/soak_real_path.py [--requests 300] [--concurrency 4] [--hog 0]
        [--env KEY=VALUE ...] [--dump-after 0] [--keep DIR] [--plot benchmarks/out/soak_real_path.png]

`--env` sets an engine environment variable (in `motor_common_env`, and over the example's per-role value of it);
`--hog N` runs N busy-looping processes next to the deployment while the requests run. `--freeze AT:FOR` stalls
prefill-0 on purpose: AT seconds into the requests its EngineCore and worker are stopped (SIGSTOP; its API server
still takes requests and never answers them) and FOR seconds later resumed (SIGCONT), to show what a stall
costs a request (the coordinator's per-leg prefill deadline, `prefill_stalled` retries, the degraded instance). Needs the vllm extra
(scripts/setup_dev.sh) and, for the plot, the bench extra. Everything listens on 127.0.0.1; `motor stop` stops the deployment (also on Ctrl-C). About 9 GB of
RAM (three engines).
"""

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx
from plotting import default_plot_path, figure, save, skipped_without_matplotlib

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from motor.config import load_config
from motor.deploy.local.state import job_dir, read_state
from motor.pool.metrics import scrape_pool
from motor.protocol.node_manager import ENGINE_PID_FILE, EngineProcessRecord
from tests.fixtures.local_example import write_local_example

MODEL_DIR = ".motor/models/tiny"
JOB_ID = "motor-soak"
MOTOR = [sys.executable, "-m", "motor.cli.main"]
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# ---- deployment ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Deployment:
    workdir: Path
    run_dir: Path
    api_url: str
    mgmt_url: str
    pool_metrics_url: str
    block_size: int


def deploy(workdir: Path, extra_env: dict[str, str]) -> Deployment:
    offline = {**os.environ, "HF_HUB_OFFLINE": "1"}
    started = time.monotonic()
    with (workdir / "motor-cli.log").open("ab") as log:
        built = subprocess.run(
            [*MOTOR, "model", "tiny", MODEL_DIR],
            cwd=workdir,
            env=offline,
            stdout=log,
            stderr=log,
            timeout=300,
        )
        if built.returncode != 0:
            raise SystemExit(f"motor model tiny failed: see {workdir / 'motor-cli.log'}")
        config_dir = write_local_example(workdir / "config", JOB_ID, extra_env)
        user_path = config_dir / "user_config.json"
        user = json.loads(user_path.read_text())
        # every dispatch transition with its time, to print the timeline of each slow request
        user["motor_coordinator_config"]["logging_config"]["log_level"] = "DEBUG"
        user_path.write_text(json.dumps(user, indent=2))
        run_root = workdir / "run"
        topology = load_config(config_dir / "user_config.json", config_dir / "env.json")
        assert topology.pool is not None
        api = topology.user.motor_coordinator_config.api_config
        deployment = Deployment(
            workdir=workdir,
            run_dir=job_dir(run_root, JOB_ID),
            api_url=f"http://127.0.0.1:{api.coordinator_api_infer_port}",
            mgmt_url=f"http://127.0.0.1:{api.coordinator_api_mgmt_port}",
            pool_metrics_url=f"http://127.0.0.1:{topology.pool.metrics_port}/metrics",
            block_size=int(topology.roles["decode"].engine_config["block_size"]),
        )
        try:
            deployed = subprocess.run(
                [*MOTOR, "deploy", "--config-dir", str(config_dir), "--run-root", str(run_root)],
                cwd=workdir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                timeout=900,
            )
        except BaseException:  # interrupted while deploying: the job's supervisor outlives `motor deploy`
            stop(deployment)
            raise
    if deployed.returncode != 0:
        stop(deployment)
        raise SystemExit(f"motor deploy failed: see {workdir / 'motor-cli.log'}")
    print(f"deployed 2 prefill + 1 decode engines in {time.monotonic() - started:.0f} s", flush=True)
    return deployment


def stop(deployment: Deployment) -> None:
    subprocess.run(
        [*MOTOR, "stop", "--job-id", JOB_ID, "--run-root", str(deployment.run_dir.parent)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=180,
    )


# ---- processes and their CPU time ----------------------------------------------------------------------------


def _children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    return children


def _descendants(root: int, children: dict[int, list[int]]) -> list[int]:
    found, stack = [], [root]
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack += children.get(pid, [])
    return found


def _title(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return "?"
    if argv[0].startswith("VLLM::"):
        return argv[0].split()[0].removeprefix("VLLM::")
    for arg in argv:
        if arg.startswith(("motor.", "vllm.")):
            return arg.rsplit(".", 1)[1] if arg.startswith("vllm.") else arg
    return Path(argv[0]).name or "?"


def deployment_processes(deployment: Deployment) -> dict[int, str]:
    """pid → "<component>/<process>" for every process of the deployment (engines through their node managers)."""
    state = read_state(deployment.run_dir)
    if state is None:
        return {}
    children = _children()
    named: dict[int, str] = {}
    for record in state.components:
        for pid in _descendants(record.pid, children):
            named[pid] = f"{record.name}/{_title(pid)}"
        engine_file = deployment.run_dir / record.name / ENGINE_PID_FILE
        if engine_file.exists():
            engine = EngineProcessRecord.model_validate_json(engine_file.read_text()).pid
            for pid in _descendants(engine, children):
                named[pid] = f"{record.name}/{_title(pid)}"
    return named


def cpu_ticks(pid: int) -> int:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])  # utime + stime


def machine_busy_ticks() -> int:
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return sum(fields) - fields[3] - fields[4]  # all but idle and iowait


@dataclass
class CpuWindow:
    """CPU seconds per deployed process and for the rest of the machine over the requests' window."""

    names: dict[int, str]
    start: dict[int, int]
    machine_start: int
    own_start: int
    began: float
    seconds: float = 0.0
    per_process: dict[str, float] = field(default_factory=dict)
    others: float = 0.0
    machine: float = 0.0

    @classmethod
    def begin(cls, names: dict[int, str]) -> "CpuWindow":
        return cls(
            names,
            {pid: cpu_ticks(pid) for pid in names},
            machine_busy_ticks(),
            cpu_ticks(os.getpid()),
            time.monotonic(),
        )

    def end(self) -> None:
        self.seconds = time.monotonic() - self.began
        ours = 0
        for pid, name in self.names.items():
            used = max(0, cpu_ticks(pid) - self.start[pid])
            self.per_process[name] = self.per_process.get(name, 0.0) + used / CLOCK_TICKS
            ours += used
        ours += cpu_ticks(os.getpid()) - self.own_start
        self.machine = (machine_busy_ticks() - self.machine_start) / CLOCK_TICKS
        self.others = max(0.0, self.machine - ours / CLOCK_TICKS)


async def freeze_prefill(deployment: Deployment, at: float, seconds: float) -> None:
    """SIGSTOP prefill-0's EngineCore and worker processes `at` seconds from now, SIGCONT `seconds` later."""
    await asyncio.sleep(at)
    frozen = [
        pid
        for pid, name in deployment_processes(deployment).items()
        if name.startswith("prefill-0/") and ("EngineCore" in name or "Worker" in name)
    ]
    print(f"  freezing prefill-0 for {seconds:g} s: pids {frozen}", flush=True)
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    try:
        await asyncio.sleep(seconds)
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
        print("  prefill-0 resumed", flush=True)


@contextmanager
def hogs(count: int) -> Iterator[None]:
    """`count` busy-looping processes (an extra CPU load), killed by pid afterwards."""
    processes = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
        for _ in range(count)
    ]
    try:
        yield
    finally:
        for process in processes:
            process.kill()
            process.wait()


# ---- requests ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Planned:
    index: int
    prompt: list[int]
    repeat: bool  # starts with a whole-block prefix of an earlier prompt
    concurrent: bool


@dataclass
class Outcome:
    planned: Planned
    error: str | None = None
    ttft: float | None = None
    e2e: float = 0.0
    max_gap: float = 0.0
    tokens: int = 0
    cached: int = 0
    started: float = 0.0  # since the first request


def plan(args: argparse.Namespace, block_size: int) -> list[Planned]:
    rng = random.Random(args.seed)
    prompts: list[list[int]] = []
    planned = []
    for index in range(args.requests):
        length = rng.randint(args.min_prompt, args.max_prompt)
        repeat = bool(prompts) and rng.random() < args.repeat_share
        prompt: list[int] = []
        if repeat:
            earlier = rng.choice(prompts)
            blocks = rng.randint(1, max(1, min(len(earlier), length - 1) // block_size))
            prompt = earlier[: blocks * block_size]
            length = max(length, len(prompt) + 1)
        prompt += [rng.randrange(3, 512) for _ in range(length - len(prompt))]
        prompts.append(prompt)
        planned.append(Planned(index, prompt, repeat, (index // args.block) % 2 == 1))
    return planned


async def send(client: httpx.AsyncClient, url: str, planned: Planned, args: argparse.Namespace) -> Outcome:
    outcome = Outcome(planned)
    body = {
        "model": "tiny",
        "prompt": planned.prompt,
        "max_tokens": args.output_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "return_token_ids": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    sent = time.perf_counter()
    last = None
    headers = {"X-Request-Id": f"soak-{planned.index}"}
    try:
        async with client.stream("POST", f"{url}/v1/completions", json=body, headers=headers) as response:
            if response.status_code != 200:
                outcome.error = f"HTTP {response.status_code} {(await response.aread())[:200]!r}"
                return outcome
            async for line in response.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    outcome.error = f"SSE error {chunk['error']}"
                    return outcome
                tokens = sum(len(c.get("token_ids") or []) for c in chunk.get("choices", []))
                if tokens:
                    now = time.perf_counter()
                    if last is None:
                        outcome.ttft = now - sent
                    else:
                        outcome.max_gap = max(outcome.max_gap, now - last)
                    last = now
                    outcome.tokens += tokens
                if chunk.get("usage"):
                    details = chunk["usage"].get("prompt_tokens_details") or {}
                    outcome.cached = details.get("cached_tokens") or 0
    except httpx.HTTPError as exc:
        outcome.error = f"{type(exc).__name__}: {exc}"
    finally:
        outcome.e2e = time.perf_counter() - sent
    if outcome.error is None and outcome.tokens != args.output_tokens:
        outcome.error = f"{outcome.tokens} output tokens, not {args.output_tokens}"
    return outcome


# symbols of Mooncake's, asio's and the C libraries only: a fraction of a second per process instead of seconds
GDB_STACKS = (
    "-batch", "-nx", "-iex", "set auto-load off", "-iex", "set debuginfod enabled off", "-iex", "set auto-solib-add off",
    "-ex", "sharedlibrary mooncake", "-ex", "sharedlibrary libstdc", "-ex", "sharedlibrary libc.so",
    "-ex", "thread apply all bt 30",
)  # fmt: skip


class StallDumper:
    """Once a request has been in flight `after` seconds: the machine's established TCP sockets (`ss`), every
    engine thread's state and kernel wait channel (`ps -L`), gdb's stacks of every EngineCore thread (if gdb is
    installed), then py-spy native stacks of every engine process."""

    def __init__(self, deployment: Deployment, after: float, out_dir: Path) -> None:
        self.deployment, self.after, self.out_dir = deployment, after, out_dir
        self.in_flight: dict[int, float] = {}
        self.dumped: set[int] = set()

    async def watch(self) -> None:
        py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        gdb = shutil.which("gdb")
        while True:
            await asyncio.sleep(0.5)
            now = time.monotonic()
            for index, since in list(self.in_flight.items()):
                if index in self.dumped or now - since < self.after:
                    continue
                self.dumped.add(index)
                target = self.out_dir / f"stall-soak-{index}-{now - since:.0f}s.txt"
                engines = [
                    (pid, name)
                    for pid, name in sorted(deployment_processes(self.deployment).items(), key=lambda p: p[1])
                    if name.startswith(("prefill-", "decode-"))
                    and not name.partition("/")[2].startswith("motor.")
                ]
                with target.open("w") as out:
                    # the fast views first, while the stall lasts: every socket's queues and owner, and each engine
                    # thread's scheduler state and kernel wait channel; py-spy takes about a second per process
                    await self._run(out, "ss", "-tnpiH", "state", "established")
                    for pid, name in engines:
                        out.write(f"==== threads of {name} pid {pid}\n")
                        await self._run(out, "ps", "-L", "-o", "tid,stat,pcpu,wchan:28,comm", "-p", str(pid))
                    if gdb:  # native stacks of every thread, Mooncake's transport threads included
                        for pid, name in engines:
                            if name.endswith("/EngineCore"):
                                out.write(f"==== native threads of {name} pid {pid}\n")
                                await self._run(out, gdb, *GDB_STACKS, "-p", str(pid))
                    for pid, name in engines:
                        out.write(f"==== {name} pid {pid} cpu {cpu_ticks(pid) / CLOCK_TICKS:.1f} s\n")
                        out.flush()
                        dump = await asyncio.create_subprocess_exec(
                            py_spy, "dump", "--native", "--pid", str(pid), stdout=out, stderr=out
                        )
                        await dump.wait()
                print(f"  soak-{index} in flight {now - since:.0f} s: stacks in {target}", flush=True)

    @staticmethod
    async def _run(out: IO[str], *argv: str) -> None:
        out.write(f"$ {' '.join(argv)}\n")
        out.flush()
        view = await asyncio.create_subprocess_exec(*argv, stdout=out, stderr=out)
        await view.wait()


async def run_requests(
    deployment: Deployment, planned: list[Planned], args: argparse.Namespace, dumper: StallDumper | None
) -> tuple[list[Outcome], list[float]]:
    timeout = httpx.Timeout(connect=10, read=args.request_timeout, write=30, pool=args.request_timeout)
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=16)
    outcomes: list[Outcome] = []
    loads: list[float] = []
    began = time.perf_counter()

    async def one(client: httpx.AsyncClient, item: Planned) -> None:
        if dumper:
            dumper.in_flight[item.index] = time.monotonic()
        started = time.perf_counter() - began
        outcome = await send(client, deployment.api_url, item, args)
        if dumper:
            dumper.in_flight.pop(item.index, None)
        outcome.started = started
        outcomes.append(outcome)
        if len(outcomes) % 25 == 0:
            slow = sum(o.e2e > args.slow_seconds or o.error is not None for o in outcomes)
            print(
                f"  {len(outcomes)}/{len(planned)} done, {slow} slow or failed, load {os.getloadavg()[0]:.1f}",
                flush=True,
            )

    async def drain(client: httpx.AsyncClient, queue: asyncio.Queue[Planned]) -> None:
        while not queue.empty():
            await one(client, queue.get_nowait())

    async def sample_load() -> None:
        while True:
            loads.append(os.getloadavg()[0])
            await asyncio.sleep(5)

    watchers = [asyncio.create_task(sample_load())]
    if args.freeze:
        at, _, seconds = args.freeze.partition(":")
        freezer = asyncio.create_task(freeze_prefill(deployment, float(at), float(seconds)))
    if dumper:
        watchers.append(asyncio.create_task(dumper.watch()))
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
        blocks: list[list[Planned]] = []
        for item in planned:
            if not blocks or blocks[-1][0].concurrent != item.concurrent:
                blocks.append([])
            blocks[-1].append(item)
        for block in blocks:
            if not block[0].concurrent:
                for item in block:
                    await one(client, item)
                continue
            queue: asyncio.Queue[Planned] = asyncio.Queue()
            for item in block:
                queue.put_nowait(item)

            await asyncio.gather(*(drain(client, queue) for _ in range(args.concurrency)))
    for task in watchers:
        task.cancel()
    if args.freeze:
        await freezer  # the engine runs again before the report (and before `motor stop`)
    return outcomes, loads


# Engine log lines that mark a stalled KV transfer (Mooncake's TCP transport, its store client, MooncakeConnector).
STALL_MARKS = {
    "TCP transfers dropped after no progress": "no transfer progress within",
    "pool reads whose lease expired first": "lease_expired_before_data_transfer_completed",
    "decode pulls that timed out waiting for P": "Timeout waiting for P side ready",
}


def engine_stall_lines(deployment: Deployment) -> dict[str, int]:
    logs = [path.read_text(errors="replace") for path in deployment.run_dir.glob("*/engine.log")]
    return {name: sum(log.count(mark) for log in logs) for name, mark in STALL_MARKS.items()}


TIMELINE = re.compile(r"\(client id (soak-\d+)\)")


def request_timelines(deployment: Deployment) -> dict[str, list[str]]:
    """Per client id, the coordinator's log lines about that request (its DEBUG transitions, retries)."""
    lines: dict[str, list[str]] = {}
    log = deployment.run_dir / "logs" / "coordinator.log"
    for line in log.read_text(errors="replace").splitlines():
        found = TIMELINE.search(line)
        if found:
            stamp = line.split(" ", 2)[1] if line[:2].isdigit() else ""
            lines.setdefault(found.group(1), []).append(f"{stamp} {line[found.end() :].lstrip(': ')}")
    return lines


def coordinator_counters(deployment: Deployment) -> dict[str, float]:
    """The coordinator's retry, cancelled-leg and prefill-stall counters, by their labels."""
    text = httpx.get(f"{deployment.mgmt_url}/metrics", timeout=10).text
    counters = {}
    for line in text.splitlines():
        if line.startswith(
            (
                "motor_coordinator_retries_total",
                "motor_coordinator_cancelled_legs_total",
                "motor_coordinator_prefill_stalls_total",
            )
        ):
            series, _, value = line.rpartition(" ")
            counters[series] = float(value)
    return counters


# ---- report --------------------------------------------------------------------------------------------------


def prefill_health(deployment: Deployment) -> list[str]:
    """Per prefill endpoint, what the coordinator measured: prefill rate, stalls, degraded (its /instances)."""
    view = httpx.get(f"{deployment.mgmt_url}/instances", timeout=10).json().get("endpoint_load", {})
    lines = []
    for key, load in sorted(view.items()):
        rate = load.get("prefill_tokens_per_second")
        if rate is None and not load.get("prefill_stalls"):
            continue
        lines.append(
            f"  {key}: {rate or 0:,.0f} prefill tokens/s over {load['prefill_legs_measured']} legs, "
            f"{load['prefill_stalls']} stalls, degraded {load['degraded']}"
        )
    return lines


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def triple(values: list[float]) -> str:
    if not values:
        return "- / - / -"
    return f"{percentile(values, 50):.2f} / {percentile(values, 99):.2f} / {max(values):.2f}"


def report(
    outcomes: list[Outcome], loads: list[float], cpu: CpuWindow, counters: dict[str, float],
    hits: tuple[int, int], stalls: dict[str, int], health: list[str], timelines: dict[str, list[str]],
    args: argparse.Namespace,
) -> None:  # fmt: skip
    ok = [o for o in outcomes if o.error is None]
    errors = [o for o in outcomes if o.error is not None]
    slow = sorted((o for o in outcomes if o.e2e > args.slow_seconds), key=lambda o: -o.e2e)
    repeats = [o for o in ok if o.planned.repeat]
    print(
        f"\nsoak: {len(outcomes)} requests ({sum(o.planned.concurrent for o in outcomes)} in {args.concurrency}-way "
        f"concurrent blocks), prompts {args.min_prompt}-{args.max_prompt} tokens, {args.output_tokens} output "
        f"tokens, {cpu.seconds:.0f} s"
    )
    print(f"| requests | errors | slower than {args.slow_seconds:g} s | retries | cancelled legs |")
    print("|---|---|---|---|---|")
    retries = sum(v for k, v in counters.items() if k.startswith("motor_coordinator_retries_total"))
    cancelled = sum(v for k, v in counters.items() if k.startswith("motor_coordinator_cancelled_legs_total"))
    print(f"| {len(outcomes)} | {len(errors)} | {len(slow)} | {retries:.0f} | {cancelled:.0f} |")
    for series, value in sorted(counters.items()):
        print(f"  {series} {value:.0f}")
    print("| seconds | P50 / P99 / max |")
    print("|---|---|")
    print(f"| TTFT | {triple([o.ttft for o in ok if o.ttft is not None])} |")
    print(f"| end to end | {triple([o.e2e for o in ok])} |")
    print(f"| longest gap between two output events of a stream | {triple([o.max_gap for o in ok])} |")
    print(
        f"pool: {sum(o.cached > 0 for o in repeats)} of {len(repeats)} repeated-prefix requests had cached tokens "
        f"({sum(o.cached for o in ok)} tokens in all, {sum(o.cached > 0 for o in ok)} requests); master get hits "
        f"{hits[1]} of {hits[0]} gets"
    )
    print("engine logs: " + ", ".join(f"{name} {count}" for name, count in stalls.items()))
    print("coordinator's view of the prefill instances at the end:", *health, sep="\n")
    print(
        f"load average (1 min) during the run: start {loads[0]:.1f}, mean {statistics.mean(loads):.1f}, "
        f"max {max(loads):.1f}; CPU used: machine {cpu.machine / cpu.seconds:.2f} cores, processes outside this "
        f"deployment and the client {cpu.others / cpu.seconds:.2f} cores ({os.cpu_count()} cores)"
    )
    print("CPU seconds per deployed process over the run:")
    for name, seconds in sorted(cpu.per_process.items(), key=lambda item: -item[1]):
        if seconds >= 0.5:
            print(f"  {name:<40} {seconds:7.1f} s  ({seconds / cpu.seconds:.2f} cores)")
    for o in slow[:15]:
        print(
            f"  slow soak-{o.planned.index}: {len(o.planned.prompt)} prompt tokens, e2e {o.e2e:.1f} s, TTFT "
            f"{o.ttft if o.ttft is None else round(o.ttft, 2)} s, max gap {o.max_gap:.2f} s, at {o.started:.0f} s, "
            f"{'concurrent' if o.planned.concurrent else 'sequential'}{', error' if o.error else ''}"
        )
        for line in timelines.get(f"soak-{o.planned.index}", []):
            print(f"      {line}")
    for o in errors[:10]:
        print(f"  error soak-{o.planned.index}: {o.error}")


@skipped_without_matplotlib
def plot(outcomes: list[Outcome], args: argparse.Namespace) -> None:
    fig, axes = figure(1, 2)
    timeline, sizes = axes[0]
    for concurrent, marker in ((False, "o"), (True, "x")):
        chosen = [o for o in outcomes if o.planned.concurrent == concurrent]
        label = f"{args.concurrency}-way concurrent" if concurrent else "sequential"
        timeline.scatter(
            [o.started for o in chosen], [o.e2e for o in chosen], s=8, marker=marker, label=label
        )
        sizes.scatter([len(o.planned.prompt) for o in chosen], [o.e2e for o in chosen], s=8, marker=marker)
    for ax in (timeline, sizes):
        ax.axhline(args.slow_seconds, color="red", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_ylabel("end to end (s)")
    timeline.set_xlabel("request start (s into the run)")
    timeline.legend(fontsize="small")
    timeline.set_title(f"soak: {len(outcomes)} requests, 2 P + 1 D vLLM CPU")
    sizes.set_xlabel("prompt tokens")
    save(fig, args.plot)


# ---- main ----------------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--block", type=int, default=20, help="requests per sequential/concurrent block")
    parser.add_argument("--min-prompt", type=int, default=64)
    parser.add_argument("--max-prompt", type=int, default=1500)
    parser.add_argument("--output-tokens", type=int, default=24)
    parser.add_argument("--repeat-share", type=float, default=0.3, help="share of prompts reusing a prefix")
    parser.add_argument("--slow-seconds", type=float, default=5.0)
    parser.add_argument("--request-timeout", type=float, default=180.0, help="client-side bound per request")
    parser.add_argument("--hog", type=int, default=0, help="busy-looping processes next to the deployment")
    parser.add_argument(
        "--freeze", metavar="AT:FOR", help="stop prefill-0's engine AT s into the run for FOR s"
    )
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="extra engine env")
    parser.add_argument("--dump-after", type=float, default=0.0, help="py-spy dumps after S s in flight")
    parser.add_argument("--keep", type=Path, help="work directory to keep (configs, logs, dumps)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", type=Path, default=default_plot_path("soak_real_path"))
    args = parser.parse_args()
    extra_env = dict(item.split("=", 1) for item in args.env)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    workdir = args.keep.resolve() if args.keep else Path(tempfile.mkdtemp(prefix="motor-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"load average {' / '.join(f'{v:.1f}' for v in os.getloadavg())} at the start; work dir {workdir}")
    if extra_env:
        print(f"extra engine env: {extra_env}")
    # Started in the background, a process inherits SIGINT ignored: both signals stop the run (and the job).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    deployment = deploy(workdir, extra_env)
    try:
        planned = plan(args, deployment.block_size)
        counters_before = coordinator_counters(deployment)
        pool_before = scrape_pool(deployment.pool_metrics_url)
        dumper = StallDumper(deployment, args.dump_after, workdir) if args.dump_after > 0 else None
        with hogs(args.hog):
            cpu = CpuWindow.begin(deployment_processes(deployment))
            outcomes, loads = asyncio.run(run_requests(deployment, planned, args, dumper))
            cpu.end()
        counters = {
            series: value - counters_before.get(series, 0.0)
            for series, value in coordinator_counters(deployment).items()
            if value - counters_before.get(series, 0.0)
        }
        health = prefill_health(deployment)
        pool_after = scrape_pool(deployment.pool_metrics_url)
        hits = (
            pool_after.get_requests - pool_before.get_requests,
            pool_after.get_hits - pool_before.get_hits,
        )
    finally:
        stop(deployment)
        stalls = engine_stall_lines(deployment)
        timelines = request_timelines(deployment)
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    if args.hog:
        print(f"with {args.hog} busy-looping process(es) next to the deployment")
    if args.freeze:
        at, _, seconds = args.freeze.partition(":")
        print(f"prefill-0 frozen (SIGSTOP) for {seconds} s from {at} s into the run")
    report(outcomes, loads, cpu, counters, hits, stalls, health, timelines, args)
    plot(outcomes, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
