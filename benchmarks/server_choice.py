"""Which HTTP server the coordinator runs on, decided by measurement: motor's own (motor/coordinator/server.py +
http_protocol.py) against a subclass of uvicorn's httptools protocol carrying the same two scope extensions
(uvicorn_candidate.py), side by side in one run.

Both coordinators are the same code with the same config and the same sim engines: `python -m motor.coordinator`
and uvicorn_candidate.py, which runs that entry point with every listener built by the candidate. The only
difference is the server class. Before measuring, each path is asked which server answers it (a malformed
request: the two answer it with different 400 bodies), so a run cannot measure the wrong one.

Paths, alternated turn by turn (the order rotates every round, so drift on a shared host falls on all of them):
- direct: straight to the engine (the baseline of "added" latency);
- motor: the coordinator on its own server;
- uvicorn-subclass: the coordinator on the uvicorn candidate.

Rows, for each `--configs` (aggregated: one union engine; prefill_first: 1P+1D, the direct call going to the
decode engine as one aggregated request):
1. sequential: one request at a time, `--sequential` per turn;
2. open loop at `--rate` (default 500 req/s; prefill_first at `--pd-rate`, default 200 req/s: on a shared 2-core
   host the two sim engines and their KV handover saturate well below 500 req/s, and a saturated row measures
   the queue, not the server) for `--turn-s` seconds per turn;
3. streams (aggregated, unless `--streams 0`): `--streams` concurrent streams of `--stream-tokens` tokens
   against a sim engine at `--stream-itl-ms`, `--stream-turns` turns per server: CPU per relayed event.

Figures per path and turn: coordinator CPU per request (user + system time of the coordinator's process tree
from /proc/<pid>/stat, read before and after the turn, divided by the requests it completed — 10 ms ticks, so a
turn's figure is good to ± 10 ms / its requests), P50 and P99 latency. Each row prints the median over the turns
(and the CPU range over turns) and the ratios motor / uvicorn-subclass; the load average after every round is
printed with it. A PNG goes to `--plot` (skipped with a note when matplotlib is missing).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/server_choice.py [--turns 5] [--sequential 2000] [--rate 500]
        [--pd-rate 200] [--turn-s 3] [--configs aggregated,prefill_first] [--streams 1000] [--stream-turns 3] [--plot PNG]

Everything listens on 127.0.0.1 on free ports; every process started here is stopped by pid at the end.
"""

import argparse
import contextlib
import importlib.util
import os
import signal
import socket
import statistics
import tempfile
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import uvloop
from coordinator_overhead import Process, percentile, register, start_coordinator, start_sim, streams
from plotting import default_plot_path, figure, save
from router_overhead import (
    Figures,
    Route,
    add_turn_options,
    alternate_turns,
    cpu_of,
    load_average,
    ms,
    open_loop_turn,
    sequential_turn,
    start_engines,
)

CONFIGS = ("aggregated", "prefill_first")
MOTOR, CANDIDATE = "motor", "uvicorn-subclass"
# what the interpreter runs with `--spec FILE` to start the coordinator on each server
LAUNCHERS = {
    MOTOR: ("-m", "motor.coordinator"),
    CANDIDATE: (str(Path(__file__).resolve().with_name("uvicorn_candidate.py")),),
}
# how each server answers a malformed request (its 400 body)
SIGNATURES = {MOTOR: b"malformed HTTP request", CANDIDATE: b"Invalid HTTP request received."}


def served_by(port: int) -> str:
    """Which server answers on `port`: the name whose 400 body answers a malformed request, else what came."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"NOT-HTTP\r\n\r\n")
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    for name, signature in SIGNATURES.items():
        if answer.startswith(b"HTTP/1.1 400") and signature in answer:
            return name
    return f"unknown ({answer[:80]!r})"


def start_servers(
    config: str, engines: dict[str, Process], work: Path, stack: contextlib.ExitStack
) -> list[Route]:
    """The direct path and the coordinator on each server, registered with the same engines."""
    direct = engines["union"] if "union" in engines else engines["decode"]
    paths = [Route("direct", direct.port, {}, None)]
    for name, launcher in LAUNCHERS.items():
        coordinator = start_coordinator(config, work, launcher=launcher)
        stack.callback(coordinator.process.stop)
        register(coordinator.mgmt_port, engines)
        if (server := served_by(coordinator.process.port)) != name:
            raise RuntimeError(
                f"the {name} coordinator is served by {server} (log: {coordinator.process.log})"
            )
        paths.append(Route(name, coordinator.process.port, coordinator.headers, coordinator.process))
    return paths


@dataclass
class Row:
    """One row's turns: for each path, the figures of each turn."""

    config: str
    section: str
    turns: dict[str, list[Figures]]
    loads: str

    def cpu_turns(self, name: str) -> list[float]:
        return [f.cpu_per_request_us for f in self.turns[name]]

    def median(self, name: str, figure_of: str) -> float:
        values = [
            value for f in self.turns[name] if (value := figure_value(f, figure_of)) == value
        ]  # not NaN
        return statistics.median(values) if values else float("nan")


def figure_value(f: Figures, figure_of: str) -> float:
    """A turn's CPU per request (µs), P50 or P99 latency (s)."""
    if figure_of == "cpu":
        return f.cpu_per_request_us
    if not f.latencies:
        return float("nan")
    return percentile(f.latencies, 0.5 if figure_of == "p50" else 0.99)


def ratio(row: Row, figure_of: str) -> float:
    return row.median(MOTOR, figure_of) / row.median(CANDIDATE, figure_of)


def by_round(row: "Row | StreamRow") -> str:
    """The two servers' CPU figures compared round by round (a round's turns ran close together in time): the
    median of the per-round ratios, and in how many rounds motor's server was the cheaper."""
    pairs = list(zip(row.cpu_turns(MOTOR), row.cpu_turns(CANDIDATE), strict=True))
    cheaper = sum(m < c for m, c in pairs)
    return f"{statistics.median(m / c for m, c in pairs):.2f}, {cheaper}/{len(pairs)}"


def print_row(row: Row) -> None:
    print(f"\n{row.config}: {row.section} (load average 1/5/15 min after each round: {row.loads})")
    print(
        f"{'path':16s} {'turns':>5s} {'requests':>8s} {'errors':>6s} {'P50 ms':>8s} {'P99 ms':>8s} "
        f"{'added P50':>9s} {'CPU/req µs':>10s} {'(range over turns)':>18s}"
    )
    direct_p50 = row.median("direct", "p50")
    for name, turns in row.turns.items():
        requests, errors = sum(f.requests for f in turns), sum(f.errors for f in turns)
        p50, p99 = row.median(name, "p50"), row.median(name, "p99")
        line = f"{name:16s} {len(turns):5d} {requests:8d} {errors:6d} {ms(p50)} {ms(p99)}"
        if name == "direct":
            print(line)
            continue
        cpus = [f.cpu_per_request_us for f in turns]
        spread = f"{min(cpus):.0f}–{max(cpus):.0f}"
        print(f"{line} {ms(p50 - direct_p50):>9s} {row.median(name, 'cpu'):10.0f} {spread:>18s}")
    print(
        f"{MOTOR} / {CANDIDATE}: CPU per request {ratio(row, 'cpu'):.2f}, P50 {ratio(row, 'p50'):.2f}, "
        f"P99 {ratio(row, 'p99'):.2f} (medians over turns); CPU by round: median ratio, motor cheaper in "
        f"{by_round(row)} rounds"
    )
    print_cpu_turns(row, "CPU/req µs", 0)


def print_cpu_turns(row: "Row | StreamRow", unit: str, digits: int) -> None:
    for name in (MOTOR, CANDIDATE):
        print(
            f"  {unit} by round, {name}: {' '.join(f'{value:.{digits}f}' for value in row.cpu_turns(name))}"
        )


def print_summary(rows: list[Row], stream: "StreamRow | None") -> None:
    print(
        f"\nsummary: medians over turns, ratio = {MOTOR} / {CANDIDATE} (below 1: motor's server is cheaper)"
    )
    print(
        f"{'row':48s} {'CPU/req µs motor':>16s} {'uvicorn':>8s} {'ratio':>6s} {'P50 ms motor':>12s} {'uvicorn':>8s} "
        f"{'ratio':>6s} {'P99 ms motor':>12s} {'uvicorn':>8s} {'ratio':>6s}  CPU by round: median ratio, motor cheaper in"
    )
    for row in rows:
        cells = []
        for figure_of, scale, width in (("cpu", 1.0, 16), ("p50", 1000.0, 12), ("p99", 1000.0, 12)):
            motor, candidate = row.median(MOTOR, figure_of) * scale, row.median(CANDIDATE, figure_of) * scale
            digits = 0 if figure_of == "cpu" else 3
            cells.append(f"{motor:{width}.{digits}f} {candidate:8.{digits}f} {motor / candidate:6.2f}")
        print(f"{row.config + ', ' + row.section:48s} {' '.join(cells)}  {by_round(row)}")
    if stream is not None:
        motor, candidate = stream.median(MOTOR), stream.median(CANDIDATE)
        cells = f"{motor:16.1f} {candidate:8.1f} {motor / candidate:6.2f}"
        print(f"{'aggregated, streams (CPU per event)':48s} {cells}{'':52s}{by_round(stream)}")


@dataclass
class StreamTurn:
    cpu_s: float
    events: int
    errors: int

    @property
    def cpu_per_event_us(self) -> float:
        return self.cpu_s / self.events * 1e6 if self.events else float("nan")


@dataclass
class StreamRow:
    section: str
    turns: dict[str, list[StreamTurn]]
    loads: str

    def cpu_turns(self, name: str) -> list[float]:
        return [t.cpu_per_event_us for t in self.turns[name]]

    def median(self, name: str) -> float:
        return statistics.median(self.cpu_turns(name))


async def stream_row(slow: Process, args: argparse.Namespace, work: Path) -> StreamRow:
    """Concurrent streams through each server in turn (the order rotating every round)."""
    with contextlib.ExitStack() as stack:
        paths = start_servers("aggregated", {"union": slow}, work, stack)[1:]  # not the direct path
        turns: dict[str, list[StreamTurn]] = {path.name: [] for path in paths}
        loads = []
        for turn in range(args.stream_turns):
            for k in range(len(paths)):
                path = paths[(turn + k) % len(paths)]
                before = cpu_of(path)
                report = await streams(path.port, args.streams, args.stream_tokens, args.ramp)
                turns[path.name].append(StreamTurn(cpu_of(path) - before, report.events, report.errors))
            loads.append(load_average())
    section = f"{args.streams} streams x {args.stream_tokens} tokens at {args.stream_itl_ms:g} ms ITL"
    return StreamRow(section, turns, " ".join(loads))


def print_stream_row(row: StreamRow) -> None:
    print(f"\naggregated: {row.section} (load average 1/5/15 min after each round: {row.loads})")
    print(
        f"{'path':16s} {'turns':>5s} {'events':>8s} {'errors':>6s} {'CPU/event µs':>12s} {'(range over turns)':>18s}"
    )
    for name, turns in row.turns.items():
        cpus = [t.cpu_per_event_us for t in turns]
        print(
            f"{name:16s} {len(turns):5d} {sum(t.events for t in turns):8d} {sum(t.errors for t in turns):6d} "
            f"{row.median(name):12.1f} {f'{min(cpus):.1f}–{max(cpus):.1f}':>18s}"
        )
    print(
        f"{MOTOR} / {CANDIDATE}: CPU per event {row.median(MOTOR) / row.median(CANDIDATE):.2f} (medians over turns); "
        f"by round: median ratio, motor cheaper in {by_round(row)} rounds"
    )
    print_cpu_turns(row, "CPU/event µs", 1)


def plot(rows: list[Row], stream: StreamRow | None, path: Path) -> None:
    if importlib.util.find_spec("matplotlib") is None:
        print(f"plot skipped: matplotlib is not installed (pip install -e '.[bench]'); not written: {path}")
        return
    fig, axes = figure(2, len(rows) + (stream is not None), width=4.5)
    servers = (MOTOR, CANDIDATE)
    for column, row in enumerate(rows):
        cpu_ax, latency_ax = axes[0][column], axes[1][column]
        for i, name in enumerate(servers):
            turns = [f.cpu_per_request_us for f in row.turns[name]]
            cpu_ax.bar(i, row.median(name, "cpu"), color=f"C{i}", alpha=0.6)
            cpu_ax.plot([i] * len(turns), turns, "k.", markersize=4)
            for j, figure_of in enumerate(("p50", "p99")):
                latency_ax.bar(
                    i * 3 + j, row.median(name, figure_of) * 1000, color=f"C{i}", alpha=0.5 + 0.3 * j
                )
        cpu_ax.set_xticks(range(len(servers)), servers)
        cpu_ax.set_title(f"{row.config}, {row.section}", fontsize="small")
        cpu_ax.set_ylabel("coordinator CPU per request (µs)\nbars: median, dots: turns")
        latency_ax.set_xticks([0, 1, 3, 4], ["motor P50", "P99", "uvicorn P50", "P99"])
        latency_ax.set_ylabel("latency (ms), median over turns")
    if stream is not None:
        cpu_ax = axes[0][-1]
        for i, name in enumerate(servers):
            turns = [t.cpu_per_event_us for t in stream.turns[name]]
            cpu_ax.bar(i, stream.median(name), color=f"C{i}", alpha=0.6)
            cpu_ax.plot([i] * len(turns), turns, "k.", markersize=4)
        cpu_ax.set_xticks(range(len(servers)), servers)
        cpu_ax.set_title(f"aggregated, {stream.section}", fontsize="small")
        cpu_ax.set_ylabel("coordinator CPU per relayed event (µs)")
        axes[1][-1].axis("off")
    save(fig, path)


async def main(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="motor-server-choice-"))
    rows: list[Row] = []
    with contextlib.ExitStack() as engines_stack:
        engines = start_engines(work, engines_stack)
        print(
            f"uvicorn {version('uvicorn')}, cpus: {os.cpu_count()}, load average {load_average()}, logs in {work}"
        )
        for config in args.configs:
            roles = ("union",) if config == "aggregated" else ("prefill", "decode")
            rate = args.rate if config == "aggregated" else args.pd_rate
            with contextlib.ExitStack() as stack:
                paths = start_servers(config, {r: engines[r] for r in roles}, work, stack)
                turns, loads = await alternate_turns(
                    paths,
                    args.turns,
                    lambda pool, target, f: sequential_turn(pool, target, args.sequential, f),
                )
                rows.append(Row(config, f"sequential, {args.sequential}/turn", turns, loads))
                print_row(rows[-1])
                turns, loads = await alternate_turns(
                    paths,
                    args.turns,
                    lambda pool, target, f, rate=rate: open_loop_turn(pool, target, rate, args.turn_s, f),
                )
                rows.append(Row(config, f"open loop {rate:g} req/s, {args.turn_s:g} s/turn", turns, loads))
                print_row(rows[-1])
        stream = None
        if args.streams:
            slow = start_sim("sim-itl", work, "kv_both", ["--itl-ms", str(args.stream_itl_ms)])
            engines_stack.callback(slow.stop)
            stream = await stream_row(slow, args, work)
            print_stream_row(stream)
    print_summary(rows, stream)
    plot(rows, stream, args.plot)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_turn_options(parser, turns=5)
    parser.set_defaults(sequential=2000)  # 10 ms CPU ticks: a turn's figure is good to ± 10 ms / its requests
    parser.add_argument("--pd-rate", type=float, default=200.0, help="open-loop requests/s for prefill_first")
    parser.add_argument("--configs", type=lambda s: s.split(","), default=list(CONFIGS))
    parser.add_argument("--streams", type=int, default=1000, help="concurrent streams per turn; 0 skips them")
    parser.add_argument("--stream-tokens", type=int, default=50)
    parser.add_argument("--stream-itl-ms", type=float, default=20.0)
    parser.add_argument("--stream-turns", type=int, default=3)
    parser.add_argument("--ramp", type=float, default=2.0, help="seconds over which the streams are opened")
    parser.add_argument("--plot", type=Path, default=default_plot_path("server_choice"), help="PNG to write")
    args = parser.parse_args()
    if unknown := set(args.configs) - set(CONFIGS):
        parser.error(f"--configs: unknown {sorted(unknown)}; choose from {', '.join(CONFIGS)}")
    return args


if __name__ == "__main__":
    # a kill ends the run like Ctrl-C: the processes started so far are stopped by pid on the way out
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    uvloop.run(main(parse_args()))
