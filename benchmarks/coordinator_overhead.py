"""What the coordinator adds: the same requests through the coordinator and straight to a sim engine, paired.

1. Added latency, per request: non-stream completions against zero-latency sim engines at fixed arrival rates
   (default 100 and 500 pairs/s, open loop: pair i starts at t0 + i/rate whatever happened before). Each pair
   is one call straight to an engine and one through the coordinator, one after the other (the order flips
   every pair), so both see the same moment of the host; the pair's difference is the latency the coordinator
   added to that request, and the table gives P50/P99 of those differences. Configurations:
   - aggregated: one union engine; the direct call goes to it.
   - prefill_first, decode_first, concurrent: a prefill and a decode engine (no pool: zero-latency engines
     recompute, so the figure is the routing, not KV I/O); the direct call goes to the decode engine as one
     aggregated request, so "added" includes the second engine leg a PD request needs.
   - aggregated + keys + rate limit: a PBKDF2 API key record (its verdict cached after the first request) and a
     token bucket large enough never to refuse.
   - aggregated + tracing: tracer_config on, every request sampled, spans exported over OTLP gRPC to a real
     receiver (opentelemetry-proto's TraceService) in this process.
   Also shown: the coordinator's own time per request (`motor_coordinator_overhead_seconds`, which excludes
   waits on engines; P50/P99 interpolated within its buckets).
2. Streams: N concurrent streams (default 2,000) against a sim engine at --itl-ms 100 (10 tokens/s per
   stream), straight and through the coordinator; counts every error (status, connection, SSE error events,
   missing [DONE], wrong token count), the peak number of streams open at once, and the coordinator's CPU time
   per relayed event.
3. `--clients`: sequential round trips to the engine with aiohttp, httpx and motor's raw client (the
   coordinator's upstream client), which is how the coordinator's client was chosen.

A PNG with the distributions of the paired added latency goes to `--plot`.

    .venv/bin/python benchmarks/coordinator_overhead.py [--duration 10] [--rates 100,500] [--streams 2000]
        [--stream-tokens 100] [--configs aggregated,prefill_first,...] [--clients] [--nice -10]
        [--plot benchmarks/out/coordinator_overhead.png]

Everything listens on 127.0.0.1 on free ports; every process started here is stopped by pid at the end.
"""

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvloop
from plotting import default_plot_path, figure, save, skipped_without_matplotlib

from motor.config import load_documents
from motor.coordinator.api.auth import hash_api_key
from motor.coordinator.http.upstream import UpstreamConnection, UpstreamPool
from motor.deploy.plan import build_plan
from motor.runtime.net import free_local_ports

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' OTLP receiver

from tests.fixtures.otlp import otlp_receiver

MODEL = "sim-model"
BODY = json.dumps(
    {"model": MODEL, "prompt": "hello there, coordinator", "max_tokens": 2, "temperature": 0}
).encode()
DONE = b"data: [DONE]\n\n"
API_KEY = "bench-key"
REFRESH_TOKEN = "bench-refresh-token"  # the controller token the bench pushes instances with
PD_CONNECTORS = {
    "prefill_first": "MooncakeConnectorV1",
    "decode_first": "MooncakeLayerwiseConnector",
    "concurrent": "MooncakeConnector",
}
SECURED = "aggregated+keys+rate"
TRACED = "aggregated+tracing"
CONFIGS = ("aggregated", *PD_CONNECTORS, SECURED, TRACED)
# where the traced configuration exports (a real OTLP gRPC receiver in this process; set by main)
trace_endpoint = ""


def free_port() -> int:
    return free_local_ports(1)[0]


def request_head(length: int, headers: dict[str, str] | None = None) -> bytes:
    extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
    return (
        f"POST /v1/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n{extra}"
        f"content-length: {length}\r\n\r\n"
    ).encode()


# ---- processes -------------------------------------------------------------------------------------------


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    port: int
    log: Path

    def stop(self) -> None:
        if self.popen.poll() is None:
            os.kill(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout=10)


def spawn(name: str, args: list[str], port: int, work: Path, env: dict[str, str] | None = None) -> Process:
    log = work / f"{name}.log"
    with log.open("ab") as out:
        # Not the caller's directory: `python -m` puts the working directory first on sys.path, which would
        # load motor from there instead of the tree PYTHONPATH names (router_overhead.py --baseline).
        popen = subprocess.Popen(
            args,
            cwd=work,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
    return Process(name, popen, port, log)


def wait_http(process: Process, url: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.popen.poll() is not None:
            raise RuntimeError(f"{process.name} exited:\n{process.log.read_text()[-3000:]}")
        with (
            contextlib.suppress(urllib.error.URLError, ConnectionError, TimeoutError),
            urllib.request.urlopen(url, timeout=1) as response,
        ):
            if response.status == 200:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{process.name} did not answer {url} within {timeout_s} s")


def start_sim(name: str, work: Path, kv_role: str, extra: list[str]) -> Process:
    port = free_port()
    transfer = {"kv_connector": "MooncakeStoreConnector", "kv_role": kv_role, "engine_id": name}
    args = [
        sys.executable, "-m", "motor.engine.sim", "--host", "127.0.0.1", "--port", str(port), "--model", MODEL,
        "--log-level", "warning", "--max-batch", "8192", "--kv-transfer-config", json.dumps(transfer), *extra,
    ]  # fmt: skip
    process = spawn(name, args, port, work)
    wait_http(process, f"http://127.0.0.1:{port}/v1/models")
    return process


@dataclass
class Coordinator:
    process: Process
    mgmt_port: int
    headers: dict[str, str]  # what every client request carries (the API key)


def coordinator_user_config(config: str, infer_port: int, mgmt_port: int) -> dict[str, Any]:
    coordinator: dict[str, Any] = {
        "logging_config": {"log_level": "WARNING"},
        "api_config": {"coordinator_api_infer_port": infer_port, "coordinator_api_mgmt_port": mgmt_port},
        "timeout_config": {"read_timeout": 60},
    }
    user: dict[str, Any] = {"version": "v2.0", "motor_coordinator_config": coordinator}
    engine: dict[str, Any] = {"engine_type": "sim", "engine_config": {"served_model_name": MODEL}}
    if config in PD_CONNECTORS:
        coordinator["scheduler_config"] = {"dispatch_profile": config}
        user["motor_deploy_config"] = {"deploy_mode": "local", "p_instances_num": 1, "d_instances_num": 1}
        for role, kv_role in (("prefill", "kv_producer"), ("decode", "kv_consumer")):
            transfer = {"kv_connector": PD_CONNECTORS[config], "kv_role": kv_role}
            user[f"motor_engine_{role}_config"] = {
                "engine_type": "sim",
                "engine_config": {"served_model_name": MODEL, "kv_transfer_config": transfer},
            }
    else:
        user["motor_deploy_config"] = {"deploy_mode": "local", "hybrid_instances_num": 1}
        user["motor_engine_union_config"] = engine
    if config == TRACED:
        coordinator["tracer_config"] = {"endpoint": trace_endpoint}  # every request sampled: the full cost
    if config == SECURED:
        coordinator["api_key_config"] = {"enable_api_key": True, "valid_keys": [hash_api_key(API_KEY)]}
        coordinator["rate_limit_config"] = {
            "enable_rate_limit": True,
            "max_requests": 1_000_000,
            "window_size": 1,
        }
    return user


def coordinator_plan(user: dict[str, Any], directory: str) -> tuple[str, dict[str, str]]:
    """The coordinator's spec file and the API keys of its environment, as `motor deploy` plans them."""
    plan = build_plan(load_documents(user, {"version": "2.0.0"}), config_dir=directory)
    env = plan.component("coordinator").env
    return plan.files["coordinator.spec.json"], {k: v for k, v in env.items() if k == "MOTOR_API_KEYS"}


# The plan of another source tree (--baseline) is made by that tree: its spec may lack keys of this one.
PLAN_IN_TREE = (
    "import json, sys; from coordinator_overhead import coordinator_plan; "
    "print(json.dumps(coordinator_plan(json.loads(sys.argv[1]), sys.argv[2])))"
)


def start_coordinator(
    config: str,
    work: Path,
    tree: Path | None = None,
    launcher: tuple[str, ...] = ("-m", "motor.coordinator"),
    python: str = sys.executable,
) -> Coordinator:
    """A coordinator from this checkout, or from the source tree `tree` (planned and run by that tree);
    `launcher`: what the interpreter runs with `--spec FILE` (server_choice.py starts a candidate server);
    `python`: the interpreter it runs on (it needs motor's runtime dependencies)."""
    infer_port, mgmt_port = free_port(), free_port()
    directory = work / f"coordinator-{config}-{infer_port}"
    directory.mkdir()
    user = coordinator_user_config(config, infer_port, mgmt_port)
    env = {}
    if tree is None:
        spec, secrets = coordinator_plan(user, str(directory))
    else:
        env["PYTHONPATH"] = str(tree)
        planned = subprocess.run(
            [sys.executable, "-c", PLAN_IN_TREE, json.dumps(user), str(directory)],
            env={**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{Path(__file__).parent}"},
            cwd=work,
            capture_output=True,
            check=True,
        )
        spec, secrets = json.loads(planned.stdout)
    spec_path = directory / "coordinator.spec.json"
    spec_path.write_text(spec)
    args = [python, *launcher, "--spec", str(spec_path)]
    # the API keys and the controller token travel in the environment, as `motor deploy` hands them over
    env.update(secrets)
    env["MOTOR_CONTROLLER_TOKEN"] = REFRESH_TOKEN
    process = spawn(f"coordinator-{config}", args, infer_port, work, env=env)
    wait_http(process, f"http://127.0.0.1:{mgmt_port}/startup")
    headers = {"authorization": f"Bearer {API_KEY}"} if config == SECURED else {}
    return Coordinator(process, mgmt_port, headers)


def register(mgmt_port: int, engines: dict[str, Process]) -> None:
    """Register `role → engine` as the coordinator's instance set."""
    instances = [
        {
            "id": engine.name,
            "role": role,
            "engine_id": engine.name,
            "model_name": MODEL,
            "endpoints": [{"host": "127.0.0.1", "port": engine.port}],
        }
        for role, engine in engines.items()
    ]
    refresh(mgmt_port, instances)


def refresh(mgmt_port: int, instances: list[dict[str, Any]]) -> None:
    """Replace the coordinator's instance set (what the controller pushes), through its management API."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{mgmt_port}/instances/refresh",
        data=json.dumps({"event": "set", "instances": instances}).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {REFRESH_TOKEN}"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def scrape(mgmt_port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{mgmt_port}/metrics", timeout=10) as response:
        return response.read().decode()


def histogram(text: str, name: str) -> list[tuple[float, float]]:
    buckets = []
    for match in re.finditer(rf'^{name}_bucket\{{le="([^"]+)"\}} (\S+)$', text, re.MULTILINE):
        buckets.append((float(match.group(1)), float(match.group(2))))
    return buckets


def histogram_quantile(
    before: list[tuple[float, float]], after: list[tuple[float, float]], q: float
) -> float:
    """Prometheus-style quantile (linear within a bucket) of the observations between two scrapes."""
    counts = [(le, a - b) for (le, a), (_, b) in zip(after, before, strict=True)]
    total = counts[-1][1]
    if total == 0:
        return float("nan")
    rank = q * total
    lower_le, lower_count = 0.0, 0.0
    for le, count in counts:
        if count >= rank:
            if le == float("inf"):
                return lower_le
            return lower_le + (le - lower_le) * (rank - lower_count) / max(count - lower_count, 1e-9)
        lower_le, lower_count = le, count
    return counts[-2][0]


# ---- host load -------------------------------------------------------------------------------------------


def _busy_seconds() -> float:
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def process_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class HostLoad:
    """CPU used by everything else on the host while a section ran (other users of a shared machine)."""

    def __init__(self, pids: list[int]) -> None:
        self._pids = pids

    def __enter__(self) -> "HostLoad":
        self._wall = time.perf_counter()
        self._busy = _busy_seconds()
        self._ours = sum(process_seconds(pid) for pid in self._pids) + time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        wall = time.perf_counter() - self._wall
        ours = sum(process_seconds(pid) for pid in self._pids) + time.process_time() - self._ours
        other = _busy_seconds() - self._busy - ours
        self.text = f"(benchmark processes used {ours / wall:.2f} cores, other processes {max(0.0, other) / wall:.2f})"


# ---- paired load -------------------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass(frozen=True)
class Target:
    port: int
    head: bytes  # the request head, headers included


async def one_request(pool: UpstreamPool, target: Target, body: bytes = BODY) -> int:
    connection = await pool.request(
        "127.0.0.1", target.port, target.head, body, head_deadline=pool.loop.time() + 30, track=[]
    )
    await connection.read_body(pool.loop.time() + 30, 30)
    connection.release()
    return connection.status


@dataclass
class Paired:
    direct: list[float] = field(default_factory=list)  # seconds, per pair that succeeded on both paths
    motor: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=lambda: {"direct": 0, "motor": 0})

    @property
    def added(self) -> list[float]:
        return [via - direct for direct, via in zip(self.direct, self.motor, strict=True)]


async def paired_open_loop(
    pools: dict[str, UpstreamPool], targets: dict[str, Target], rate: float, duration: float
) -> Paired:
    """`rate × duration` pairs started open loop; within a pair the two calls run one after the other, the
    order flipping every pair, each timed from its own start."""
    result = Paired()

    async def pair(index: int) -> None:
        order = ("direct", "motor") if index % 2 == 0 else ("motor", "direct")
        timed: dict[str, float] = {}
        for path in order:
            started = time.perf_counter()
            try:
                status = await one_request(pools[path], targets[path])
            except Exception:
                status = 0
            if status != 200:
                result.errors[path] += 1
                continue
            timed[path] = time.perf_counter() - started
        if len(timed) == 2:
            result.direct.append(timed["direct"])
            result.motor.append(timed["motor"])

    count = int(rate * duration)
    start = time.perf_counter() + 0.02
    tasks = []
    for i in range(count):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(pair(i)))
    await asyncio.gather(*tasks)
    return result


@dataclass
class ConfigResult:
    config: str
    rate: float
    paired: Paired
    self_p50: float
    self_p99: float
    load: str


async def measure_config(
    config: str, engines: dict[str, Process], work: Path, args: argparse.Namespace
) -> list[ConfigResult]:
    coordinator = start_coordinator(config, work)
    try:
        pd = config in PD_CONNECTORS
        register(
            coordinator.mgmt_port,
            {"prefill": engines["prefill"], "decode": engines["decode"]}
            if pd
            else {"union": engines["union"]},
        )
        direct = engines["decode"] if pd else engines["union"]
        targets = {
            "direct": Target(direct.port, request_head(len(BODY))),
            "motor": Target(coordinator.process.port, request_head(len(BODY), coordinator.headers)),
        }
        pools = {name: UpstreamPool(connect_timeout=10, write_timeout=10) for name in targets}
        for name, pool in pools.items():
            for _ in range(200):  # warm connections, both processes and the API key's cached verdict
                status = await one_request(pool, targets[name])
                if status != 200:
                    raise RuntimeError(f"{config}: warm-up through {name} answered {status}")
        results = []
        pids = [p.popen.pid for p in (*engines.values(), coordinator.process)]
        for rate in args.rates:
            before = histogram(scrape(coordinator.mgmt_port), "motor_coordinator_overhead_seconds")
            with HostLoad(pids) as load:
                paired = await paired_open_loop(pools, targets, rate, args.duration)
            after = histogram(scrape(coordinator.mgmt_port), "motor_coordinator_overhead_seconds")
            results.append(
                ConfigResult(
                    config,
                    rate,
                    paired,
                    histogram_quantile(before, after, 0.5),
                    histogram_quantile(before, after, 0.99),
                    load.text,
                )
            )
        for pool in pools.values():
            pool.close()
        return results
    finally:
        coordinator.process.stop()


def ms(seconds: float) -> str:
    return f"{seconds * 1000:7.3f}"


def print_paired(results: list[ConfigResult]) -> None:
    print(
        "\nadded latency per request, non-stream completions, paired open loop (ms; direct = one call straight "
        "to an engine,\nadded = through the coordinator minus its paired direct call; self = the coordinator's "
        "own time per request)"
    )
    print(
        f"{'config':22s} {'rate':>5s} {'pairs':>6s} {'err d/m':>8s} {'direct P50':>10s} {'P99':>8s} "
        f"{'motor P50':>10s} {'P99':>8s} {'added P50':>10s} {'P99':>8s} {'self P50':>9s} {'P99':>8s}"
    )
    for r in results:
        p = r.paired
        if not p.added:
            print(
                f"{r.config:22s} {r.rate:5.0f} {0:6d} {p.errors['direct']:>3d}/{p.errors['motor']:<4d} (no pair)"
            )
            continue
        print(
            f"{r.config:22s} {r.rate:5.0f} {len(p.added):6d} {p.errors['direct']:>3d}/{p.errors['motor']:<4d} "
            f"{ms(percentile(p.direct, 0.5)):>10s} {ms(percentile(p.direct, 0.99))} "
            f"{ms(percentile(p.motor, 0.5)):>10s} {ms(percentile(p.motor, 0.99))} "
            f"{ms(percentile(p.added, 0.5)):>10s} {ms(percentile(p.added, 0.99))} "
            f"{ms(r.self_p50):>9s} {ms(r.self_p99)}  {r.load}"
        )


@skipped_without_matplotlib
def plot(results: list[ConfigResult], rates: list[float], path: Path) -> None:
    fig, axes = figure(1, len(rates))
    for ax, rate in zip(axes[0], rates, strict=True):
        for r in results:
            if r.rate == rate and r.paired.added:
                added = sorted(x * 1000 for x in r.paired.added)
                low, high = added[int(len(added) * 0.001)], added[int(len(added) * 0.999) - 1]
                clipped = [min(max(x, low), high) for x in added]
                ax.hist(clipped, bins=80, histtype="step", label=r.config, density=True)
        ax.set_title(f"added latency per request, {rate:g} pairs/s")
        ax.set_xlabel("through the coordinator − paired direct call (ms, 0.1–99.9th percentile)")
        ax.set_ylabel("density")
        ax.legend(fontsize="small")
    save(fig, path)


# ---- streams -------------------------------------------------------------------------------------------------


@dataclass
class StreamReport:
    opened: int
    errors: int
    peak_open: int
    kinds: dict[str, int]
    seconds: float
    events: int


async def streams(port: int, count: int, tokens: int, ramp_s: float) -> StreamReport:
    pool = UpstreamPool(connect_timeout=30, write_timeout=30)
    body = json.dumps(
        {"model": MODEL, "prompt": "stream please", "max_tokens": tokens, "ignore_eos": True, "stream": True}
    ).encode()
    head = request_head(len(body))
    kinds: dict[str, int] = {}
    open_now = peak = opened = events_seen = 0

    def failed(kind: str) -> None:
        kinds[kind] = kinds.get(kind, 0) + 1

    async def one() -> None:
        nonlocal open_now, peak, opened, events_seen
        try:
            connection: UpstreamConnection = await pool.request(
                "127.0.0.1", port, head, body, head_deadline=pool.loop.time() + 60, track=[]
            )
        except Exception as exc:
            failed(f"connect: {type(exc).__name__}")
            return
        if connection.status != 200:
            failed(f"status {connection.status}")
            connection.abort()
            return
        opened += 1
        open_now += 1
        peak = max(peak, open_now)
        events, tail = 0, b""
        try:
            while (chunk := await connection.next_chunk(pool.loop.time() + 60, 30)) is not None:
                events += chunk.count(b"data: {")
                if b'"error"' in chunk:
                    failed("SSE error event")
                tail = (tail + chunk)[-64:]
        except Exception as exc:
            failed(f"broken: {type(exc).__name__}")
            return
        finally:
            open_now -= 1
            events_seen += events
        if not tail.endswith(DONE):
            failed("no [DONE]")
        elif events != tokens:
            failed(f"{events} events instead of {tokens}")
        connection.release()

    started = time.perf_counter()
    tasks = []
    for i in range(count):
        tasks.append(asyncio.ensure_future(one()))
        if i % 50 == 49:
            await asyncio.sleep(ramp_s * 50 / count)
    await asyncio.gather(*tasks)
    pool.close()
    return StreamReport(opened, sum(kinds.values()), peak, kinds, time.perf_counter() - started, events_seen)


async def client_comparison(port: int, count: int, rounds: int = 10) -> list[tuple[str, float, float, float]]:
    """(client, P50 s, P99 s, client CPU s per request): interleaved rounds so every client sees the same noise."""
    import aiohttp
    import httpx

    url = f"http://127.0.0.1:{port}/v1/completions"
    headers = {"content-type": "application/json"}
    pool = UpstreamPool(connect_timeout=10, write_timeout=10)
    target = Target(port, request_head(len(BODY)))
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session,
        httpx.AsyncClient() as client,
    ):

        async def with_aiohttp() -> None:
            async with session.post(url, data=BODY, headers=headers) as response:
                await response.read()

        async def with_httpx() -> None:
            (await client.post(url, content=BODY, headers=headers)).read()

        async def with_raw() -> None:
            await one_request(pool, target)

        calls: dict[str, Callable[[], Awaitable[None]]] = {
            "aiohttp": with_aiohttp,
            "httpx": with_httpx,
            "motor raw (httptools)": with_raw,
        }
        samples: dict[str, list[float]] = {name: [] for name in calls}
        cpu: dict[str, float] = dict.fromkeys(calls, 0.0)
        for call in calls.values():
            for _ in range(100):
                await call()
        for _ in range(rounds):
            for name, call in calls.items():
                cpu_start = time.process_time()
                for _ in range(count // rounds):
                    started = time.perf_counter()
                    await call()
                    samples[name].append(time.perf_counter() - started)
                cpu[name] += time.process_time() - cpu_start
    pool.close()
    return [
        (name, percentile(values, 0.5), percentile(values, 0.99), cpu[name] / len(values))
        for name, values in samples.items()
    ]


# ---- main --------------------------------------------------------------------------------------------------


async def main(args: argparse.Namespace) -> None:
    if args.nice:
        # On a host shared with other work: favour the benchmark's processes (inherited by the children).
        os.nice(args.nice)
    work = Path(tempfile.mkdtemp(prefix="motor-coordinator-bench-"))
    processes: list[Process] = []
    try:
        engines = {
            "union": start_sim("sim-union", work, "kv_both", []),
            "prefill": start_sim("sim-prefill", work, "kv_producer", []),
            "decode": start_sim("sim-decode", work, "kv_consumer", []),
        }
        processes += engines.values()
        slow = start_sim("sim-itl100", work, "kv_both", ["--itl-ms", "100"])
        processes.append(slow)
        print(
            f"cpus: {os.cpu_count()}, niceness {os.nice(0)}, load average "
            f"{' / '.join(f'{v:.1f}' for v in os.getloadavg())}, logs in {work}"
        )

        if args.clients:
            print("\nupstream client, sequential round trips to the sim engine (ms; client CPU per request)")
            print(f"{'client':24s} {'P50':>8s} {'P99':>8s} {'CPU/req':>8s}")
            for name, p50, p99, cpu in await client_comparison(engines["union"].port, args.client_requests):
                print(f"{name:24s} {ms(p50)} {ms(p99)} {ms(cpu)}")

        results: list[ConfigResult] = []
        with contextlib.ExitStack() as receivers:
            if TRACED in args.configs:
                global trace_endpoint
                trace_endpoint = receivers.enter_context(otlp_receiver("grpc")).endpoint
            for config in args.configs:
                results += await measure_config(config, engines, work, args)
                print(f"  measured {config}", flush=True)
        print_paired(results)
        plot(results, args.rates, args.plot)

        if args.streams:
            coordinator = start_coordinator("aggregated", work)
            processes.append(coordinator.process)
            register(coordinator.mgmt_port, {"union": slow})
            pids = [p.popen.pid for p in processes]
            print(f"\n{args.streams} concurrent streams, {args.stream_tokens} tokens each at 10 tokens/s")
            print(
                f"{'path':12s} {'opened':>7s} {'peak open':>9s} {'errors':>7s} {'seconds':>8s} "
                f"{'events/s':>9s} {'coordinator CPU':>16s}  error kinds"
            )
            for name, port in (("direct", slow.port), ("coordinator", coordinator.process.port)):
                cpu_before = process_seconds(coordinator.process.popen.pid)
                with HostLoad(pids) as load:
                    report = await streams(port, args.streams, args.stream_tokens, args.ramp)
                cpu = process_seconds(coordinator.process.popen.pid) - cpu_before
                per_event = f"{cpu / report.events * 1e6:.1f} µs/event" if name == "coordinator" else "-"
                print(
                    f"{name:12s} {report.opened:7d} {report.peak_open:9d} {report.errors:7d} "
                    f"{report.seconds:8.1f} {report.events / report.seconds:9.0f} {per_event:>16s}"
                    f"  {report.kinds or '-'}  {load.text}"
                )
                if name == "coordinator":
                    print(
                        f"the coordinator relayed {report.events} events on {cpu:.2f} CPU s "
                        f"({cpu / report.seconds:.2f} of a core while the streams ran)"
                    )
    finally:
        for process in reversed(processes):
            process.stop()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--duration", type=float, default=10.0, help="seconds of paired load per rate and config"
    )
    parser.add_argument("--rates", type=lambda s: [float(r) for r in s.split(",")], default=[100.0, 500.0])
    parser.add_argument(
        "--configs",
        type=lambda s: s.split(","),
        default=list(CONFIGS),
        help=f"comma-separated subset of {', '.join(CONFIGS)}",
    )
    parser.add_argument("--streams", type=int, default=2000, help="0 skips the stream section")
    parser.add_argument(
        "--stream-tokens", type=int, default=100, help="tokens per stream (10 s at 10 tokens/s)"
    )
    parser.add_argument("--ramp", type=float, default=2.0, help="seconds over which the streams are opened")
    parser.add_argument("--clients", action="store_true", help="also compare upstream HTTP clients")
    parser.add_argument("--client-requests", type=int, default=3000)
    parser.add_argument(
        "--nice",
        type=int,
        default=0,
        help="niceness increment for all benchmark processes (negative needs root)",
    )
    parser.add_argument(
        "--plot", type=Path, default=default_plot_path("coordinator_overhead"), help="PNG to write"
    )
    args = parser.parse_args()
    unknown = set(args.configs) - set(CONFIGS)
    if unknown:
        parser.error(f"--configs: unknown {sorted(unknown)}; choose from {', '.join(CONFIGS)}")
    return args


if __name__ == "__main__":
    uvloop.run(main(parse_args()))
