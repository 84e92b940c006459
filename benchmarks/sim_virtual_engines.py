"""How many requests per second one motor-sim process serves across many virtual engines (`--virtual-engines`),
with a capacity model that costs nothing and with the capacity model's default ("realistic") timings.

One sim process serves N engines on N ports, pinned to one core (taskset); the load generator (aiohttp, closed
loop, keep-alive) runs on the other core and spreads its connections evenly over the engines. Each request is a
completion of a fresh prompt (no prefix hits), streamed or not. `cpu µs/req` divides the server's CPU time by
the requests it answered: the cost of one request whatever else runs on the machine; req/s is wall clock.
`server cpu` and `client cpu` are the shares of a core each used: a client near 100 % limits req/s, and then
1 / (cpu µs/req) is what the server could do with a whole core. `engine max` is the busiest engine's share of
the requests (1 / engines when the load is even).

    .venv/bin/python benchmarks/sim_virtual_engines.py [--engines 32] [--duration 8] [--concurrency 256]
        [--prompt-words 128] [--max-tokens 16] [--kv-bytes-per-token 16] [--server-cpu 0 --client-cpu 1]
"""

import argparse
import asyncio
import itertools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import uvloop
from sim_engine import cpu_seconds

from motor.engine.sim.capacity import CapacityModel
from motor.engine.sim.cli import capacity_flags

MODELS = {
    "off": [],  # no capacity model: the zero latency model, for comparison
    "zero-cost": capacity_flags(CapacityModel.free()),
    "realistic": capacity_flags(CapacityModel(enabled=True)),  # the defaults: docs/sim-capacity-model.md
}
_LISTENING = re.compile(rb"motor-sim listening on http://127\.0\.0\.1:(\d+) \(virtual engine")


@dataclass
class Result:
    model: str
    stream: bool
    requests_per_s: float
    tokens_per_s: float
    cpu_us_per_request: float
    p50_ms: float
    p99_ms: float
    busiest_engine_share: float
    server_cpu_share: float
    client_cpu_share: float
    load_average: float


def start_sim(
    engines: int, model_args: list[str], kv_bytes_per_token: int, cpu: int, log_path: Path
) -> tuple[subprocess.Popen[bytes], list[int]]:
    command = [
        sys.executable,
        "-m",
        "motor.engine.sim",
        "--port",
        "0",
        "--model",
        "bench",
        "--log-level",
        "warning",
    ]
    command += ["--virtual-engines", str(engines), "--num-gpu-blocks-override", "16384"]
    command += ["--kv-bytes-per-token", str(kv_bytes_per_token), *model_args]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            ["taskset", "-c", str(cpu), *command], stdout=log, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the sim exited with {process.returncode}:\n{log_path.read_text()[-3000:]}")
        ports = [int(port) for port in _LISTENING.findall(log_path.read_bytes())]
        if len(ports) == engines and all(serving(port) for port in ports):
            return process, ports
        time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"the sim did not start within 60 s:\n{log_path.read_text()[-3000:]}")


def serving(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=1) as response:
            return response.status == 200
    except OSError:
        return False


async def load(
    ports: list[int], duration_s: float, concurrency: int, prompt_words: int, max_tokens: int, stream: bool
) -> tuple[list[float], list[int], int]:
    """Closed loop: `concurrency` workers, worker i always on engine i mod N. Returns latencies, requests per
    engine and output tokens."""
    latencies: list[float] = []
    per_engine = [0] * len(ports)
    tokens = 0
    numbers = itertools.count()
    stop_at = time.perf_counter() + duration_s
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker(index: int) -> None:
            nonlocal tokens
            engine = index % len(ports)
            url = f"http://127.0.0.1:{ports[engine]}/v1/completions"
            while time.perf_counter() < stop_at:
                prompt = " ".join(f"w{next(numbers)}" for _ in range(prompt_words))
                body = {"prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, "stream": stream}
                started = time.perf_counter()
                async with session.post(url, json=body) as response:
                    raw = await response.read()
                    if response.status != 200:
                        raise RuntimeError(f"HTTP {response.status}: {raw[:300]!r}")
                latencies.append(time.perf_counter() - started)
                per_engine[engine] += 1
                tokens += raw.count(b'"text"') if stream else json.loads(raw)["usage"]["completion_tokens"]

        await asyncio.gather(*(worker(index) for index in range(concurrency)))
    return latencies, per_engine, tokens


def measure(args: argparse.Namespace, model: str, stream: bool, workdir: Path) -> Result:
    log_path = workdir / f"sim-{model}-{stream}.log"
    process, ports = start_sim(
        args.engines, MODELS[model], args.kv_bytes_per_token, args.server_cpu, log_path
    )
    try:
        uvloop.run(load(ports, 1.0, args.concurrency, args.prompt_words, args.max_tokens, stream))  # warm-up
        load_average = os.getloadavg()[0]
        cpu_before = cpu_seconds(process.pid)
        client_before = time.process_time()
        started = time.perf_counter()
        latencies, per_engine, tokens = uvloop.run(
            load(ports, args.duration, args.concurrency, args.prompt_words, args.max_tokens, stream)
        )
        elapsed = time.perf_counter() - started
        cpu = cpu_seconds(process.pid) - cpu_before
        client_cpu = time.process_time() - client_before
    finally:
        process.terminate()
        process.wait(timeout=10)
    latencies.sort()
    count = len(latencies)
    return Result(
        model,
        stream,
        count / elapsed,
        tokens / elapsed,
        cpu / count * 1e6,
        statistics.median(latencies) * 1e3,
        latencies[int(count * 0.99)] * 1e3,
        max(per_engine) / count,
        cpu / elapsed,
        client_cpu / elapsed,
        load_average,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--engines", type=int, default=32, help="virtual engines in the one sim process")
    parser.add_argument("--duration", type=float, default=8.0, help="seconds of load per measurement")
    parser.add_argument("--concurrency", type=int, default=256, help="requests in flight (closed loop)")
    parser.add_argument("--prompt-words", type=int, default=128, help="prompt tokens per request")
    parser.add_argument("--max-tokens", type=int, default=16, help="output tokens per request")
    parser.add_argument(
        "--kv-bytes-per-token",
        type=int,
        default=16,
        help="real KV bytes the sim synthesises per token (its default is 1024; small is cheaper, see the doc)",
    )
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    args = parser.parse_args()

    os.sched_setaffinity(0, {args.client_cpu})
    with tempfile.TemporaryDirectory(prefix="bench-sim-virtual-") as tmp:
        results = [measure(args, model, stream, Path(tmp)) for model in MODELS for stream in (False, True)]
    print(
        f"\none sim process, {args.engines} virtual engines, server on cpu {args.server_cpu}, client on cpu "
        f"{args.client_cpu}; {args.concurrency} requests in flight, prompts of {args.prompt_words} tokens, "
        f"{args.max_tokens} output tokens, --kv-bytes-per-token {args.kv_bytes_per_token}, {args.duration:g} s per row"
    )
    header = f"{'model':<10} {'stream':<6} {'req/s':>7} {'tok/s':>8} {'cpu µs/req':>10} {'p50 ms':>8} {'p99 ms':>8}"
    print(header + f" {'engine max':>10} {'server cpu':>10} {'client cpu':>10} {'load avg':>8}")
    for result in results:
        print(
            f"{result.model:<10} {'yes' if result.stream else 'no':<6} {result.requests_per_s:>7.0f} "
            f"{result.tokens_per_s:>8.0f} {result.cpu_us_per_request:>10.0f} {result.p50_ms:>8.1f} "
            f"{result.p99_ms:>8.1f} {result.busiest_engine_share:>10.3f} {result.server_cpu_share:>10.0%} "
            f"{result.client_cpu_share:>10.0%} {result.load_average:>8.2f}"
        )


if __name__ == "__main__":
    main()
