"""motor-sim throughput on one core: tiny non-stream completions with a zero latency model, side by side with
the floor of the same server stack (a raw ASGI app on uvicorn + uvloop + httptools that answers a canned
completion), so the table shows what the simulator itself costs per request.

The server is pinned to one core (taskset), the load generator to the other: an aiohttp client with many
keep-alive connections, and Debian's `wrk` too when it is installed (apt-get install wrk), which needs far
less CPU per request and so measures the server closer to its limit.

The two servers run side by side and take turns (`--turns`, the order flipping every turn), so both see the
same background load on a shared machine. A PNG (req/cpu-s per server, latency distributions) goes to `--plot`.

    .venv/bin/python benchmarks/sim_engine.py [--duration 8] [--turns 8] [--concurrency 64]
        [--server-cpu 0 --client-cpu 1] [--plot benchmarks/out/sim_engine.png]
"""

import argparse
import asyncio
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import uvloop
from plotting import default_plot_path, figure, save, skipped_without_matplotlib

from motor.runtime.net import free_local_ports

BODY = {"model": "bench", "prompt": "hello there, simulator", "max_tokens": 2, "temperature": 0}

FLOOR_APP = """
import uvicorn
BODY = b'{"id":"cmpl-x","object":"text_completion","created":0,"model":"bench","choices":[{"index":0,"text":" a b",\
"logprobs":null,"finish_reason":"length","stop_reason":null}],"usage":{"prompt_tokens":4,"total_tokens":6,\
"completion_tokens":2}}'
HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})
uvicorn.run(app, host="127.0.0.1", port=PORT, loop="uvloop", http="httptools", lifespan="off",
            access_log=False, log_level="warning", proxy_headers=False, server_header=False, date_header=False)
"""


@dataclass
class Result:
    server: str
    client: str
    requests: int = 0
    seconds: float = 0.0
    server_cpu_s: float = 0.0
    latencies: list[float] = field(default_factory=list)  # aiohttp: every request's
    turn_percentiles: list[tuple[float, float]] = field(default_factory=list)  # wrk: (p50, p99) ms per turn

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.seconds

    @property
    def requests_per_cpu_s(self) -> float:
        return self.requests / self.server_cpu_s

    def percentiles_ms(self) -> tuple[float, float]:
        if self.latencies:
            ordered = sorted(self.latencies)
            return statistics.median(ordered) * 1e3, ordered[int(len(ordered) * 0.99)] * 1e3
        return (
            statistics.median(p50 for p50, _ in self.turn_percentiles),
            statistics.median(p99 for _, p99 in self.turn_percentiles),
        )


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process: robust to other load on the machine, unlike req/s."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    return free_local_ports(1)[0]


def start_server(kind: str, port: int, cpu: int, log_path: Path) -> subprocess.Popen[bytes]:
    if kind == "motor-sim":
        command = [sys.executable, "-m", "motor.engine.sim", "--port", str(port), "--model", "bench"]
        command += ["--log-level", "warning"]
    else:
        command = [sys.executable, "-c", FLOOR_APP.replace("PORT", str(port))]
    with log_path.open("wb") as log:
        return subprocess.Popen(["taskset", "-c", str(cpu), *command], stdout=log, stderr=subprocess.STDOUT)


def wait_serving(url: str, process: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    request = urllib.request.Request(
        url, data=json.dumps(BODY).encode(), headers={"content-type": "application/json"}
    )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        try:
            with urllib.request.urlopen(request, timeout=1) as response:
                if response.status == 200 and json.loads(response.read())["choices"]:
                    return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{url} did not answer within {timeout_s} s")


async def aiohttp_load(url: str, duration_s: float, concurrency: int) -> tuple[int, list[float]]:
    payload = json.dumps(BODY).encode()
    headers = {"content-type": "application/json"}
    latencies: list[float] = []
    errors = 0
    stop_at = time.perf_counter() + duration_s
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            nonlocal errors
            while time.perf_counter() < stop_at:
                started = time.perf_counter()
                async with session.post(url, data=payload, headers=headers) as response:
                    await response.read()
                    if response.status != 200:
                        errors += 1
                latencies.append(time.perf_counter() - started)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    if errors:
        raise RuntimeError(f"{errors} requests failed")
    return len(latencies), latencies


def aiohttp_turn(url: str, duration_s: float, concurrency: int, server_pid: int, result: Result) -> None:
    cpu_before = cpu_seconds(server_pid)
    started = time.perf_counter()
    count, latencies = uvloop.run(aiohttp_load(url, duration_s, concurrency))
    result.seconds += time.perf_counter() - started
    result.server_cpu_s += cpu_seconds(server_pid) - cpu_before
    result.requests += count
    result.latencies += latencies


_WRK_SCRIPT = """wrk.method = "POST"
wrk.body = '{body}'
wrk.headers["Content-Type"] = "application/json"
"""


def _wrk_ms(text: str, label: str) -> float:
    match = re.search(rf"^\s*{label}\s+([\d.]+)(us|ms|s)\s*$", text, re.MULTILINE)
    if match is None:
        raise RuntimeError(f"no {label} latency in wrk output:\n{text}")
    value, unit = float(match.group(1)), match.group(2)
    return value * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]


def wrk_command(url: str, concurrency: int, cpu: int, workdir: Path) -> list[str]:
    script = workdir / "post.lua"
    script.write_text(_WRK_SCRIPT.format(body=json.dumps(BODY)))
    return ["taskset", "-c", str(cpu), "wrk", "-t1", f"-c{concurrency}", "--latency", "-s", str(script), url]


def wrk_turn(command: list[str], duration_s: float, server_pid: int, result: Result) -> None:
    cpu_before = cpu_seconds(server_pid)
    run = subprocess.run([*command, f"-d{duration_s:g}s"], check=True, capture_output=True, text=True)
    result.server_cpu_s += cpu_seconds(server_pid) - cpu_before
    output = run.stdout
    if "Non-2xx" in output or "Socket errors" in output:
        raise RuntimeError(f"wrk saw failures:\n{output}")
    total = re.search(r"(\d+) requests in ([\d.]+)(ms|s)", output)
    if total is None:
        raise RuntimeError(f"no request counts in wrk output:\n{output}")
    result.requests += int(total.group(1))
    result.seconds += float(total.group(2)) / (1000 if total.group(3) == "ms" else 1)
    result.turn_percentiles.append((_wrk_ms(output, "50%"), _wrk_ms(output, "99%")))


@skipped_without_matplotlib
def plot(results: list[Result], path: Path) -> None:
    fig, axes = figure(1, 2)
    bars, latency = axes[0]
    labels = [f"{r.server}\n{r.client}" for r in results]
    bars.bar(labels, [r.requests_per_cpu_s for r in results], color="tab:blue")
    bars.set_ylabel("requests per server CPU second")
    bars.set_title("capacity of one core")
    for result in results:
        if result.latencies:
            latency.hist(
                [x * 1e3 for x in result.latencies],
                bins=100,
                histtype="step",
                label=result.server,
                density=True,
            )
    latency.set_xlabel("latency ms (aiohttp client)")
    latency.set_yscale("log")
    latency.set_title("latency distribution")
    latency.legend()
    save(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=8.0, help="seconds of load per server and client")
    parser.add_argument("--turns", type=int, default=8, help="alternating turns the duration is split into")
    parser.add_argument("--concurrency", type=int, default=64, help="keep-alive connections")
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    parser.add_argument("--plot", type=Path, default=default_plot_path("sim_engine"), help="PNG to write")
    args = parser.parse_args()

    os.sched_setaffinity(0, {args.client_cpu})
    clients = ["aiohttp"] + (["wrk"] if shutil.which("wrk") else [])
    if "wrk" not in clients:
        print("wrk not installed (apt-get install wrk): measuring with the aiohttp client only")
    servers = ("asgi-floor", "motor-sim")
    results = {(server, client): Result(server, client) for server in servers for client in clients}
    turn_s = args.duration / args.turns
    with tempfile.TemporaryDirectory(prefix="bench-sim-") as tmp:
        workdir = Path(tmp)
        processes = {}
        try:
            for server in servers:  # both serve on the same core; only the one under load uses it
                port = free_port()
                processes[server] = (
                    start_server(server, port, args.server_cpu, workdir / f"{server}.log"),
                    f"http://127.0.0.1:{port}/v1/completions",
                )
            for process, url in processes.values():
                wait_serving(url, process)
                uvloop.run(aiohttp_load(url, 1.0, args.concurrency))  # warm-up
            for turn in range(args.turns):  # the two servers take turns, the order flips every turn
                for server in servers if turn % 2 == 0 else servers[::-1]:
                    process, url = processes[server]
                    for client in clients:
                        result = results[(server, client)]
                        if client == "aiohttp":
                            aiohttp_turn(url, turn_s, args.concurrency, process.pid, result)
                        else:
                            command = wrk_command(url, args.concurrency, args.client_cpu, workdir)
                            wrk_turn(command, turn_s, process.pid, result)
        finally:
            for process, _ in processes.values():
                process.terminate()
                process.wait(timeout=10)

    print(
        f"\nnon-stream completions (max_tokens {BODY['max_tokens']}), zero latency model, server on cpu "
        f"{args.server_cpu}, client on cpu {args.client_cpu}, {args.concurrency} connections, {args.duration:g} s "
        f"per server and client in {args.turns} alternating turns"
    )
    print("req/cpu-s = requests per second of server CPU time: the capacity of one whole core, unaffected by")
    print("other load on the machine; req/s is the wall-clock rate of this run. wrk's percentiles are the")
    print("median of its per-turn figures.")
    print(f"{'server':<12} {'client':<8} {'req/s':>9} {'req/cpu-s':>10} {'p50 ms':>8} {'p99 ms':>8}")
    for result in results.values():
        p50, p99 = result.percentiles_ms()
        print(
            f"{result.server:<12} {result.client:<8} {result.requests_per_s:>9.0f} "
            f"{result.requests_per_cpu_s:>10.0f} {p50:>8.2f} {p99:>8.2f}"
        )
    for client in clients:
        floor, sim = results[("asgi-floor", client)], results[("motor-sim", client)]
        print(
            f"motor-sim / floor ({client}): {sim.requests_per_cpu_s / floor.requests_per_cpu_s:.2f} per CPU second"
        )
    print(f"load average {' / '.join(f'{v:.1f}' for v in os.getloadavg())} at the end")
    plot(list(results.values()), args.plot)


if __name__ == "__main__":
    main()
