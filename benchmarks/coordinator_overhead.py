"""What the coordinator adds: the same open-loop load through the coordinator and straight to a sim engine.

1. Added latency: non-stream completions against a zero-latency sim engine at fixed arrival rates (default
   100 and 500 req/s, open loop: request i is due at t0 + i/rate whatever happened before, latency counts from
   that due time), straight to the engine and through the coordinator (aggregated profile, one process) in
   alternating one-second turns, so both paths share the host's background noise. Reports P50/P99 of both and
   the difference, plus the coordinator's own self-overhead histogram.
2. Streams: N concurrent streams (default 2,000) against a sim engine at --itl-ms 100 (10 tokens/s per
   stream), straight and through the coordinator; counts every error (status, connection, SSE error events,
   missing [DONE], wrong token count) and the peak number of streams open at once.
3. `--clients`: sequential round trips to the engine with aiohttp, httpx and motor's raw client (the
   coordinator's upstream client), which is how the coordinator's client was chosen.

    .venv/bin/python benchmarks/coordinator_overhead.py [--duration 10] [--rates 100,500] [--streams 2000]
        [--stream-tokens 100] [--clients] [--nice -10]

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
from dataclasses import dataclass
from pathlib import Path

import uvloop

from motor.config import load_documents
from motor.coordinator.upstream import UpstreamConnection, UpstreamPool
from motor.deploy.plan import build_plan
from motor.pool.net import free_local_ports

MODEL = "sim-model"
BODY = json.dumps(
    {"model": MODEL, "prompt": "hello there, coordinator", "max_tokens": 2, "temperature": 0}
).encode()
HEAD = (
    b"POST /v1/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
    b"content-length: %d\r\n\r\n"
)
DONE = b"data: [DONE]\n\n"


def free_port() -> int:
    return free_local_ports(1)[0]


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
        popen = subprocess.Popen(
            args,
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


def start_sim(name: str, work: Path, extra: list[str]) -> Process:
    port = free_port()
    args = [
        sys.executable,
        "-m",
        "motor.engine.sim",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--model",
        MODEL,
        "--log-level",
        "warning",
        "--max-batch",
        "8192",
        *extra,
    ]
    process = spawn(name, args, port, work)
    wait_http(process, f"http://127.0.0.1:{port}/v1/models")
    return process


def start_coordinator(work: Path) -> tuple[Process, int]:
    infer_port, mgmt_port = free_port(), free_port()
    user = {
        "version": "v2.0",
        "motor_deploy_config": {"deploy_mode": "local", "hybrid_instances_num": 1},
        "motor_engine_union_config": {"engine_type": "sim", "engine_config": {"served_model_name": MODEL}},
        "motor_coordinator_config": {
            "logging_config": {"log_level": "WARNING"},
            "api_config": {"coordinator_api_infer_port": infer_port, "coordinator_api_mgmt_port": mgmt_port},
            "timeout_config": {"read_timeout": 60},
        },
    }
    plan = build_plan(load_documents(user, {"version": "2.0.0"}), config_dir=str(work))
    spec_path = work / "coordinator.spec.json"
    spec_path.write_text(plan.files[spec_path.name])
    args = [sys.executable, "-m", "motor.coordinator", "--spec", str(spec_path)]
    process = spawn("coordinator", args, infer_port, work)
    wait_http(process, f"http://127.0.0.1:{mgmt_port}/startup")
    return process, mgmt_port


def register(mgmt_port: int, engine: Process) -> None:
    event = {
        "event": "set",
        "instances": [
            {
                "id": engine.name,
                "role": "union",
                "engine_id": engine.name,
                "model_name": MODEL,
                "endpoints": [{"host": "127.0.0.1", "port": engine.port}],
            }
        ],
    }
    request = urllib.request.Request(
        f"http://127.0.0.1:{mgmt_port}/instances/refresh",
        data=json.dumps(event).encode(),
        headers={"Content-Type": "application/json"},
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


def _process_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class HostLoad:
    """CPU used by everything else on the host while a section ran (other users of a shared machine)."""

    def __init__(self, pids: list[int]) -> None:
        self._pids = pids

    def __enter__(self) -> "HostLoad":
        self._wall = time.perf_counter()
        self._busy = _busy_seconds()
        self._ours = sum(_process_seconds(pid) for pid in self._pids) + time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        wall = time.perf_counter() - self._wall
        ours = sum(_process_seconds(pid) for pid in self._pids) + time.process_time() - self._ours
        other = _busy_seconds() - self._busy - ours
        self.text = f"(benchmark processes used {ours / wall:.2f} cores, other processes {max(0.0, other) / wall:.2f})"


# ---- load --------------------------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def one_request(pool: UpstreamPool, port: int) -> int:
    connection = await pool.request(
        "127.0.0.1", port, HEAD % len(BODY), BODY, head_deadline=pool.loop.time() + 30, track=[]
    )
    await connection.read_body(pool.loop.time() + 30, 30)
    connection.release()
    return connection.status


async def open_loop(pool: UpstreamPool, port: int, rate: float, duration: float) -> tuple[list[float], int]:
    """Latencies (s, from each request's due time) and the error count of `rate × duration` requests."""
    latencies: list[float] = []
    errors = 0

    async def run(due: float) -> None:
        nonlocal errors
        try:
            status = await one_request(pool, port)
        except Exception:
            errors += 1
            return
        if status != 200:
            errors += 1
            return
        latencies.append(time.perf_counter() - due)

    count = int(rate * duration)
    start = time.perf_counter() + 0.02
    tasks = []
    for i in range(count):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(run(due)))
    await asyncio.gather(*tasks)
    return latencies, errors


async def compare(
    direct_port: int, coordinator_port: int, rate: float, duration: float, slices: int
) -> dict[str, tuple[list[float], int]]:
    """Both paths in alternating one-slice turns, so both see the same background noise on a shared host."""
    pools = {name: UpstreamPool(connect_timeout=10, write_timeout=10) for name in ("direct", "coordinator")}
    ports = {"direct": direct_port, "coordinator": coordinator_port}
    results: dict[str, tuple[list[float], int]] = {name: ([], 0) for name in pools}
    for name, pool in pools.items():
        for _ in range(200):  # warm connections and both processes
            await one_request(pool, ports[name])
    for turn in range(slices):
        order = ("direct", "coordinator") if turn % 2 == 0 else ("coordinator", "direct")
        for name in order:
            latencies, errors = await open_loop(pools[name], ports[name], rate, duration / slices)
            results[name][0].extend(latencies)
            results[name] = (results[name][0], results[name][1] + errors)
    for pool in pools.values():
        pool.close()
    return results


@dataclass
class StreamReport:
    opened: int
    errors: int
    peak_open: int
    kinds: dict[str, int]
    seconds: float


async def streams(port: int, count: int, tokens: int, ramp_s: float) -> StreamReport:
    pool = UpstreamPool(connect_timeout=30, write_timeout=30)
    body = json.dumps(
        {"model": MODEL, "prompt": "stream please", "max_tokens": tokens, "ignore_eos": True, "stream": True}
    ).encode()
    kinds: dict[str, int] = {}
    open_now = peak = opened = 0

    def failed(kind: str) -> None:
        kinds[kind] = kinds.get(kind, 0) + 1

    async def one() -> None:
        nonlocal open_now, peak, opened
        try:
            connection: UpstreamConnection = await pool.request(
                "127.0.0.1", port, HEAD % len(body), body, head_deadline=pool.loop.time() + 60, track=[]
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
    return StreamReport(opened, sum(kinds.values()), peak, kinds, time.perf_counter() - started)


async def client_comparison(port: int, count: int, rounds: int = 10) -> list[tuple[str, float, float, float]]:
    """(client, P50 s, P99 s, client CPU s per request): interleaved rounds so every client sees the same noise."""
    import aiohttp
    import httpx

    url = f"http://127.0.0.1:{port}/v1/completions"
    headers = {"content-type": "application/json"}
    pool = UpstreamPool(connect_timeout=10, write_timeout=10)
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
            await one_request(pool, port)

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


def ms(seconds: float) -> str:
    return f"{seconds * 1000:7.3f}"


async def main(args: argparse.Namespace) -> None:
    if args.nice:
        # On a host shared with other work: favour the benchmark's processes (inherited by the children).
        os.nice(args.nice)
    work = Path(tempfile.mkdtemp(prefix="motor-coordinator-bench-"))
    processes: list[Process] = []
    try:
        fast = start_sim("sim-fast", work, [])
        processes.append(fast)
        slow = start_sim("sim-itl100", work, ["--itl-ms", "100"])
        processes.append(slow)
        coordinator, mgmt_port = start_coordinator(work)
        processes.append(coordinator)
        print(f"cpus: {os.cpu_count()}, niceness {os.nice(0)}, logs in {work}")

        if args.clients:
            print("\nupstream client, sequential round trips to the sim engine (ms; client CPU per request)")
            print(f"{'client':24s} {'P50':>8s} {'P99':>8s} {'CPU/req':>8s}")
            for name, p50, p99, cpu in await client_comparison(fast.port, args.client_requests):
                print(f"{name:24s} {ms(p50)} {ms(p99)} {ms(cpu)}")

        register(mgmt_port, fast)
        print("\nadded latency, non-stream completions, open loop (ms from each request's due time)")
        print(
            f"{'rate':>6s} {'path':12s} {'n':>6s} {'err':>4s} {'P50':>8s} {'P99':>8s} | coordinator self-overhead P50/P99"
        )
        pids = [p.popen.pid for p in processes]
        for rate in args.rates:
            before = histogram(scrape(mgmt_port), "motor_coordinator_overhead_seconds")
            with HostLoad(pids) as load:
                results = await compare(fast.port, coordinator.port, rate, args.duration, args.slices)
            after = histogram(scrape(mgmt_port), "motor_coordinator_overhead_seconds")
            own50 = histogram_quantile(before, after, 0.5)
            own99 = histogram_quantile(before, after, 0.99)
            (direct, direct_errors), (via, via_errors) = results["direct"], results["coordinator"]
            d50, d99 = percentile(direct, 0.5), percentile(direct, 0.99)
            v50, v99 = percentile(via, 0.5), percentile(via, 0.99)
            print(f"{rate:6.0f} {'direct':12s} {len(direct):6d} {direct_errors:4d} {ms(d50)} {ms(d99)}")
            print(
                f"{rate:6.0f} {'coordinator':12s} {len(via):6d} {via_errors:4d} {ms(v50)} {ms(v99)} |"
                f" {ms(own50)} {ms(own99)}"
            )
            print(f"{rate:6.0f} {'added':12s} {'':6s} {'':4s} {ms(v50 - d50)} {ms(v99 - d99)}   {load.text}")

        register(mgmt_port, slow)
        print(f"\n{args.streams} concurrent streams, {args.stream_tokens} tokens each at 10 tokens/s")
        print(f"{'path':12s} {'opened':>7s} {'peak open':>9s} {'errors':>7s} {'seconds':>8s}  error kinds")
        for name, port in (("direct", slow.port), ("coordinator", coordinator.port)):
            with HostLoad(pids) as load:
                report = await streams(port, args.streams, args.stream_tokens, args.ramp)
            print(
                f"{name:12s} {report.opened:7d} {report.peak_open:9d} {report.errors:7d} {report.seconds:8.1f}"
                f"  {report.kinds or '-'}  {load.text}"
            )
    finally:
        for process in reversed(processes):
            process.stop()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of load per rate and path")
    parser.add_argument(
        "--slices", type=int, default=10, help="alternating turns per rate (direct, coordinator)"
    )
    parser.add_argument("--rates", type=lambda s: [float(r) for r in s.split(",")], default=[100.0, 500.0])
    parser.add_argument("--streams", type=int, default=2000)
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
    return parser.parse_args()


if __name__ == "__main__":
    uvloop.run(main(parse_args()))
