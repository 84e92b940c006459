"""motor's coordinator against the Rust routers users pick instead, on the same engines and the same load.

Paths, alternated turn by turn in one run (the order rotates every turn, so each path sees the same host):
- direct: straight to the engine (the baseline "added" latency is measured against);
- motor: the coordinator;
- vllm-router (0.1.17, `bench` extra): regular mode with the engine as its worker; for prefill_first its vLLM PD
  mode (`--vllm-pd-disaggregation`, the prefill and the decode engine);
- smg (SGLang Model Gateway 1.13.0, `bench` extra): `smg launch` with the engine as its worker, aggregated only
  (it has no PD mode for vLLM-style engines);
- with `--baseline DIR` and/or `--baseline-python PATH`, also motor@base: the coordinator from another source
  tree, or on another interpreter, for before/after figures.

Both Rust routers run `--policy round_robin`, their cheapest (their default, cache_aware, keeps a prefix tree
per request, which a one-worker proxy does not need), without retries or circuit breaker.

Engines are zero-latency sim engines: one union engine for the aggregated proxy, 1P+1D for prefill_first (the
direct call then goes to the decode engine as one aggregated request, so "added" includes the second leg a PD
request needs). Every router gets its own metrics port.

Figures per path (router CPU = user + system time of the router's process tree from /proc, read before and
after each turn of that path, divided by the requests the turn completed — the kernel counts it in 10 ms ticks,
so a path's figure is good to ± turns × 10 ms / its requests; the host's load average is printed with every
table):
1. sequential: one request at a time; P50/P99 latency, added P50/P99 (path minus direct, same percentile) and
   CPU per request;
2. open loop at `--rate` (default 500 req/s): latency P50/P99, errors, CPU per request;
3. streams (aggregated, `--streams` concurrent streams of `--stream-tokens` tokens against a sim engine at
   `--stream-itl-ms`): CPU per relayed event and the router's RSS after the streams.

A PNG with CPU per request by path goes to `--plot`.

    .venv/bin/python benchmarks/router_overhead.py [--turns 3] [--sequential 500] [--rate 500] [--turn-s 3]
        [--streams 1000] [--stream-tokens 50] [--configs aggregated,prefill_first] [--paths motor,vllm-router,smg]
        [--baseline DIR] [--baseline-python PATH]

Everything listens on 127.0.0.1 on free ports; every process started here is stopped by pid at the end.
"""

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import uvloop
from cluster_scheduling import tree_cpu_seconds
from coordinator_overhead import (
    BODY,
    Process,
    Target,
    free_port,
    one_request,
    percentile,
    register,
    request_head,
    spawn,
    start_coordinator,
    start_sim,
    streams,
    wait_http,
)
from plotting import default_plot_path, figure, save, skipped_without_matplotlib

from motor.coordinator.http.upstream import UpstreamPool

CONFIGS = ("aggregated", "prefill_first")
ROUTERS = ("motor", "vllm-router", "smg")
BIN = Path(sys.executable).parent


@dataclass
class Route:
    name: str
    port: int
    headers: dict[str, str]
    process: Process | None  # None for the direct path


def start_rust_router(binary: str, route_flags: list[str], log_level: str, work: Path) -> Process:
    """vllm-router or smg on a free port, its metrics listener on another (both default to 29000)."""
    port, metrics_port = free_port(), free_port()
    args = [str(BIN / binary), *route_flags, "--host", "127.0.0.1", "--port", str(port), "--policy", "round_robin",
            "--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics_port), "--log-level", log_level,
            "--disable-retries", "--disable-circuit-breaker"]  # fmt: skip
    process = spawn(f"{binary}-{port}", args, port, work)
    wait_http(process, f"http://127.0.0.1:{port}/health", timeout_s=60)
    return process


def start_vllm_router(engines: dict[str, Process], work: Path) -> Process:
    if "union" in engines:
        flags = ["--worker-urls", f"http://127.0.0.1:{engines['union'].port}"]
    else:
        flags = ["--vllm-pd-disaggregation", "--prefill", f"http://127.0.0.1:{engines['prefill'].port}"]
        flags += ["--decode", f"http://127.0.0.1:{engines['decode'].port}"]
    return start_rust_router("vllm-router", flags, "warning", work)


def start_smg(engines: dict[str, Process], work: Path) -> Process:
    flags = ["launch", "--worker-urls", f"http://127.0.0.1:{engines['union'].port}"]
    return start_rust_router("smg", flags, "warn", work)


@dataclass(frozen=True)
class MotorSources:
    """What a motor path runs: the sources in `tree` (None: this checkout) on the interpreter `python`."""

    tree: Path | None
    python: str


HERE = MotorSources(None, sys.executable)  # the path motor


def start_motor(
    config: str, engines: dict[str, Process], work: Path, name: str, sources: MotorSources
) -> Route:
    coordinator = start_coordinator(config, work, sources.tree, python=sources.python)
    register(coordinator.mgmt_port, engines)
    return Route(name, coordinator.process.port, coordinator.headers, coordinator.process)


def start_paths(
    config: str,
    engines: dict[str, Process],
    routers: list[str],
    work: Path,
    baseline: MotorSources | None,
    stack: contextlib.ExitStack,
) -> list[Route]:
    """The direct path and one per router; each router process is stopped when `stack` closes."""
    direct = engines["union"] if "union" in engines else engines["decode"]
    paths = [Route("direct", direct.port, {}, None)]

    def add(route: Route) -> None:
        assert route.process is not None
        stack.callback(route.process.stop)
        paths.append(route)

    for router in routers:
        if router == "motor":
            add(start_motor(config, engines, work, "motor", HERE))
            if baseline is not None:
                add(start_motor(config, engines, work, "motor@base", baseline))
        elif router == "vllm-router":
            process = start_vllm_router(engines, work)
            add(Route(router, process.port, {}, process))
        elif router == "smg" and config == "aggregated":
            process = start_smg(engines, work)
            add(Route(router, process.port, {}, process))
    return paths


def cpu_of(path: Route) -> float:
    return tree_cpu_seconds(path.process.popen.pid) if path.process else 0.0


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def load_average() -> str:
    return "/".join(f"{v:.1f}" for v in os.getloadavg())


@dataclass
class Figures:
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    cpu_s: float = 0.0
    requests: int = 0

    @property
    def cpu_per_request_us(self) -> float:
        return self.cpu_s / self.requests * 1e6 if self.requests else float("nan")


Turn = Callable[[UpstreamPool, Target, Figures], Awaitable[None]]


async def timed(pool: UpstreamPool, target: Target, figures: Figures) -> None:
    started = time.perf_counter()
    try:
        status = await one_request(pool, target)
    except Exception:
        status = 0
    if status == 200:
        figures.latencies.append(time.perf_counter() - started)
    else:
        figures.errors += 1


async def sequential_turn(pool: UpstreamPool, target: Target, count: int, figures: Figures) -> None:
    for _ in range(count):
        await timed(pool, target, figures)


async def open_loop_turn(
    pool: UpstreamPool, target: Target, rate: float, seconds: float, figures: Figures
) -> None:
    start = time.perf_counter() + 0.01
    tasks = []
    for i in range(int(rate * seconds)):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(timed(pool, target, figures)))
    await asyncio.gather(*tasks)


async def alternate_turns(
    paths: list[Route], turns: int, run_turn: Turn
) -> tuple[dict[str, list[Figures]], str]:
    """`turns` rounds; in each, every path runs one turn (its own Figures), the order rotating by one every
    round. Returns each path's turns and the load average after each round."""
    results: dict[str, list[Figures]] = {path.name: [] for path in paths}
    pools = {path.name: UpstreamPool(connect_timeout=10, write_timeout=10) for path in paths}
    targets = {path.name: Target(path.port, request_head(len(BODY), path.headers)) for path in paths}
    for path in paths:  # warm connections and every router's first-request work
        for _ in range(100):
            status = await one_request(pools[path.name], targets[path.name])
            if status != 200:
                raise RuntimeError(f"warm-up through {path.name} answered {status}")
    loads = []
    for turn in range(turns):
        for k in range(len(paths)):
            path = paths[(turn + k) % len(paths)]
            figures = Figures()
            before = cpu_of(path)
            await run_turn(pools[path.name], targets[path.name], figures)
            figures.cpu_s = cpu_of(path) - before
            figures.requests = len(figures.latencies)
            results[path.name].append(figures)
        loads.append(load_average())
    for pool in pools.values():
        pool.close()
    return results, " ".join(loads)


async def alternate(paths: list[Route], turns: int, run_turn: Turn) -> tuple[dict[str, Figures], str]:
    """`alternate_turns`, each path's turns taken together."""
    results, loads = await alternate_turns(paths, turns, run_turn)
    return {name: merged(figures) for name, figures in results.items()}, loads


def merged(turns: list[Figures]) -> Figures:
    return Figures(
        latencies=[latency for f in turns for latency in f.latencies],
        errors=sum(f.errors for f in turns),
        cpu_s=sum(f.cpu_s for f in turns),
        requests=sum(f.requests for f in turns),
    )


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.3f}"


def print_table(title: str, figures: dict[str, Figures], loads: str, added: bool) -> None:
    print(f"\n{title} (load average 1/5/15 min after each round: {loads})")
    header = f"{'path':12s} {'requests':>8s} {'errors':>6s} {'P50 ms':>8s} {'P99 ms':>8s}"
    if added:
        header += f" {'added P50':>9s} {'P99':>8s}"
    print(header + f" {'CPU/req µs':>10s}")
    direct = figures.get("direct")
    for name, f in figures.items():
        if not f.latencies:
            print(f"{name:12s} {0:8d} {f.errors:6d} (nothing answered)")
            continue
        p50, p99 = percentile(f.latencies, 0.5), percentile(f.latencies, 0.99)
        row = f"{name:12s} {len(f.latencies):8d} {f.errors:6d} {ms(p50)} {ms(p99)}"
        if added and direct is not None and direct.latencies:
            row += f" {ms(p50 - percentile(direct.latencies, 0.5)):>9s} {ms(p99 - percentile(direct.latencies, 0.99))}"
        cpu = "-" if name == "direct" else f"{f.cpu_per_request_us:10.0f}"
        print(row + f" {cpu:>10s}")


@dataclass
class StreamFigures:
    events: int = 0
    errors: int = 0
    cpu_s: float = 0.0
    rss_mib: float = 0.0


async def stream_section(slow: Process, routers: list[str], args: argparse.Namespace, work: Path) -> None:
    with contextlib.ExitStack() as stack:
        routes = start_paths("aggregated", {"union": slow}, routers, work, args.baseline, stack)
        paths = routes[1:]  # the routers, not the direct path
        results = {path.name: StreamFigures() for path in paths}
        loads = []
        for turn in range(args.stream_turns):
            for k in range(len(paths)):
                path = paths[(turn + k) % len(paths)]
                before = cpu_of(path)
                report = await streams(path.port, args.streams, args.stream_tokens, args.ramp)
                result = results[path.name]
                result.cpu_s += cpu_of(path) - before
                result.events += report.events
                result.errors += report.errors
                result.rss_mib = rss_mib(path.process.popen.pid)
            loads.append(load_average())
        print(
            f"\nstreams: {args.streams} concurrent, {args.stream_tokens} tokens each at {args.stream_itl_ms:g} ms ITL, "
            f"{args.stream_turns} turn(s) per path (load average after each round: {' '.join(loads)})"
        )
        print(f"{'path':12s} {'events':>8s} {'errors':>6s} {'CPU/event µs':>12s} {'RSS after MiB':>13s}")
        for name, r in results.items():
            per_event = r.cpu_s / r.events * 1e6 if r.events else float("nan")
            print(f"{name:12s} {r.events:8d} {r.errors:6d} {per_event:12.1f} {r.rss_mib:13.0f}")


@skipped_without_matplotlib
def plot(rows: list[tuple[str, str, dict[str, Figures]]], path: Path) -> None:
    fig, axes = figure(1, len(rows))
    for ax, (config, section, figures) in zip(axes[0], rows, strict=True):
        names = [name for name in figures if name != "direct"]
        ax.bar(
            names, [figures[n].cpu_per_request_us for n in names], color=[f"C{i}" for i in range(len(names))]
        )
        ax.set_title(f"{config}, {section}")
        ax.set_ylabel("router CPU per request (µs)")
    save(fig, path)


def start_engines(work: Path, stack: contextlib.ExitStack) -> dict[str, Process]:
    """Zero-latency sim engines by role: union (aggregated), prefill and decode; stopped when `stack` closes."""
    engines: dict[str, Process] = {}
    for role, kv_role in (("union", "kv_both"), ("prefill", "kv_producer"), ("decode", "kv_consumer")):
        engines[role] = start_sim(f"sim-{role}", work, kv_role, [])
        stack.callback(engines[role].stop)
    return engines


async def main(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="motor-router-bench-"))
    rows: list[tuple[str, str, dict[str, Figures]]] = []
    with contextlib.ExitStack() as engines_stack:
        engines = start_engines(work, engines_stack)
        print(f"cpus: {os.cpu_count()}, load average {load_average()}, logs in {work}")
        for config in args.configs:
            roles = ("union",) if config == "aggregated" else ("prefill", "decode")
            with contextlib.ExitStack() as stack:
                paths = start_paths(
                    config, {r: engines[r] for r in roles}, args.paths, work, args.baseline, stack
                )
                figures, loads = await alternate(
                    paths,
                    args.turns,
                    lambda pool, target, f: sequential_turn(pool, target, args.sequential, f),
                )
                print_table(
                    f"{config}: sequential, {args.sequential} requests per turn", figures, loads, True
                )
                rows.append((config, "sequential", figures))
                figures, loads = await alternate(
                    paths,
                    args.turns,
                    lambda pool, target, f: open_loop_turn(pool, target, args.rate, args.turn_s, f),
                )
                title = f"{config}: open loop {args.rate:g} req/s, {args.turn_s:g} s per turn"
                print_table(title, figures, loads, False)
                rows.append((config, f"{args.rate:g} req/s", figures))
        if args.streams:
            slow = start_sim("sim-itl", work, "kv_both", ["--itl-ms", str(args.stream_itl_ms)])
            engines_stack.callback(slow.stop)
            await stream_section(slow, args.paths, args, work)
        plot(rows, args.plot)


def add_turn_options(parser: argparse.ArgumentParser, turns: int) -> None:
    """The options of the sequential and open-loop turns."""
    parser.add_argument("--turns", type=int, default=turns, help="rounds; every path runs one turn per round")
    parser.add_argument("--sequential", type=int, default=500, help="sequential requests per turn")
    parser.add_argument("--rate", type=float, default=500.0, help="open-loop requests/s")
    parser.add_argument("--turn-s", type=float, default=3.0, help="seconds per open-loop turn")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_turn_options(parser, turns=3)
    parser.add_argument("--streams", type=int, default=1000, help="concurrent streams per turn; 0 skips them")
    parser.add_argument("--stream-tokens", type=int, default=50)
    parser.add_argument("--stream-itl-ms", type=float, default=20.0)
    parser.add_argument("--stream-turns", type=int, default=1)
    parser.add_argument("--ramp", type=float, default=2.0, help="seconds over which the streams are opened")
    parser.add_argument("--configs", type=lambda s: s.split(","), default=list(CONFIGS))
    parser.add_argument("--paths", type=lambda s: s.split(","), default=list(ROUTERS))
    parser.add_argument(
        "--baseline",
        type=Path,
        help="also run the coordinator from this source tree (e.g. `git archive <commit> motor | tar -x -C DIR`) "
        "as the path motor@base, to measure a change before/after in the same run",
    )
    parser.add_argument(
        "--baseline-python",
        help="the interpreter motor@base runs on (default: this one); alone, motor@base is this checkout on it, "
        "to measure what the interpreter's build costs (it needs motor's runtime extra installed)",
    )
    parser.add_argument(
        "--plot", type=Path, default=default_plot_path("router_overhead"), help="PNG to write"
    )
    args = parser.parse_args()
    if unknown := set(args.configs) - set(CONFIGS):
        parser.error(f"--configs: unknown {sorted(unknown)}; choose from {', '.join(CONFIGS)}")
    if unknown := set(args.paths) - set(ROUTERS):
        parser.error(f"--paths: unknown {sorted(unknown)}; choose from {', '.join(ROUTERS)}")
    args.baseline = (
        MotorSources(args.baseline, args.baseline_python or sys.executable)
        if args.baseline is not None or args.baseline_python is not None
        else None
    )
    return args


if __name__ == "__main__":
    # a kill ends the run like Ctrl-C: the processes started so far are stopped by pid on the way out
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    uvloop.run(main(parse_args()))
