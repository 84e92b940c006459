"""Scheduler decision cost: pick + allocate + release, per policy, from 16 to 65,536 endpoints.

One decision is what a leg costs the scheduler: `pick` (filters, scorers, picker — for prefix_affinity also
the prompt's block hashes and the prefix index), `allocate` of the leg's load on the chosen endpoint, and the
`release` of one allocation (the oldest of a rolling window of in-flight legs, so loads keep changing and the
heap keeps moving). Endpoints start with uneven background load. Every decision is timed on its own with
`perf_counter_ns`; the table shows P50/P99/max in µs and a PNG (`--plot`) P50 and P99 per policy.

    .venv/bin/python benchmarks/scheduler.py [--decisions 20000] [--sizes 16,256,1000,4096,65536]
        [--policies round_robin,load_balance,prefix_affinity] [--exclude 0] [--plot benchmarks/out/scheduler.png]

Only the scheduler's public surface is used (`Scheduler(policy, …)`, `set_targets`, `pick`, `allocate`,
`Allocation.release`, `Demand`, `Target`). To measure a checkout from before the filter → scorer → picker
split (load on `Target`, `Demand` in `scheduler.py`, `set_targets` taking `{role: [targets]}`), change the
`Demand` import and the `set_targets` call accordingly.
"""

import argparse
import gc
import os
import random
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from plotting import default_plot_path, figure, save, skipped_without_matplotlib

from motor.coordinator.registry import Target
from motor.coordinator.scheduling.demand import Demand
from motor.coordinator.scheduling.scheduler import Scheduler

POLICIES = ("round_robin", "load_balance", "prefix_affinity")
SIZES = (16, 256, 1000, 4096, 65536)
ROLE = "prefill"
BLOCK_SIZE = 128
SHARED_PREFIXES = 32
PROMPT_CHARS = 2048
IN_FLIGHT_WINDOW = 64


@dataclass
class Result:
    policy: str
    endpoints: int
    p50_us: float
    p99_us: float
    max_us: float


def make_targets(n: int) -> list[Target]:
    return [
        Target(
            key=f"p{i}@10.0.{i >> 8 & 255}.{i & 255}:8000",
            instance_id=f"p{i}",
            role=ROLE,
            engine_id=f"engine-{i}",
            model_name="m",
            host=f"10.0.{i >> 8 & 255}.{i & 255}",
            port=8000,
            bootstrap_port=None,
        )
        for i in range(n)
    ]


def make_demands(count: int, rng: random.Random) -> list[Demand]:
    """Prompts sharing one of a few system prompts, each with its own tail (fresh objects: no cached hashes)."""
    prefixes = [f"system prompt {k}: " + "x" * (PROMPT_CHARS - 40) for k in range(SHARED_PREFIXES)]
    demands = []
    for i in range(count):
        text = f"{prefixes[rng.randrange(SHARED_PREFIXES)]} question {i} " + "y" * rng.randrange(600)
        demands.append(Demand(prompt_tokens=len(text) // 4, max_new_tokens=128, prompt_text=text))
    return demands


def measure(policy: str, n: int, decisions: int, exclude_count: int, seed: int) -> Result:
    rng = random.Random(seed)
    scheduler = Scheduler(policy, affinity_block_size=BLOCK_SIZE)  # type: ignore[arg-type]
    targets = make_targets(n)
    scheduler.set_targets(targets)
    background = [
        scheduler.allocate(targets[rng.randrange(n)], rng.randint(1, 2000), rng.randint(0, 2000))
        for _ in range(max(1, n // 2))
    ]
    excluded = frozenset(f"p{rng.randrange(n)}" for _ in range(exclude_count))
    demands = make_demands(decisions + IN_FLIGHT_WINDOW, rng)
    window: deque = deque()
    for demand in demands[:IN_FLIGHT_WINDOW]:  # warm-up fills the in-flight window
        target = scheduler.pick(ROLE, demand, excluded)
        window.append(scheduler.allocate(target, demand.prompt_tokens, demand.prompt_tokens))
    samples = [0] * decisions
    clock = time.perf_counter_ns
    gc.collect()
    for i, demand in enumerate(demands[IN_FLIGHT_WINDOW:]):
        started = clock()
        target = scheduler.pick(ROLE, demand, excluded)
        window.append(scheduler.allocate(target, demand.prompt_tokens, demand.prompt_tokens))
        window.popleft().release()
        samples[i] = clock() - started
    for allocation in (*window, *background):
        allocation.release()
    samples.sort()
    return Result(
        policy,
        n,
        samples[len(samples) // 2] / 1000,
        samples[min(len(samples) - 1, int(len(samples) * 0.99))] / 1000,
        samples[-1] / 1000,
    )


def print_table(results: list[Result], sizes: list[int], policies: list[str]) -> None:
    by_key = {(r.policy, r.endpoints): r for r in results}
    header = f"{'endpoints':>9} | " + " | ".join(f"{p + ' P50/P99/max µs':>36}" for p in policies)
    print(header)
    print("-" * len(header))
    for n in sizes:
        cells = []
        for policy in policies:
            r = by_key[(policy, n)]
            cells.append(f"{f'{r.p50_us:.2f} / {r.p99_us:.2f} / {r.max_us:.0f}':>36}")
        print(f"{n:>9} | " + " | ".join(cells))


@skipped_without_matplotlib
def plot(results: list[Result], sizes: list[int], policies: list[str], path: Path, title: str) -> None:
    fig, axes = figure(width=7.0, height=4.5)
    ax = axes[0][0]
    for policy in policies:
        rows = sorted((r for r in results if r.policy == policy), key=lambda r: r.endpoints)
        xs = [r.endpoints for r in rows]
        (line,) = ax.plot(xs, [r.p99_us for r in rows], marker="o", label=f"{policy} P99")
        ax.plot(
            xs,
            [r.p50_us for r in rows],
            marker=".",
            linestyle="--",
            color=line.get_color(),
            label=f"{policy} P50",
        )
    ax.set_xscale("log")
    ax.set_xticks(sizes, [f"{n:,}" for n in sizes])
    ax.set_xlabel("endpoints of the role")
    ax.set_ylabel("µs per decision (pick + allocate + release)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    save(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--decisions", type=int, default=20_000, help="timed decisions per policy and size")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument(
        "--exclude", type=int, default=0, help="instances excluded in every pick (as after failed attempts)"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--plot", type=Path, default=default_plot_path("scheduler"), help="PNG to write")
    parser.add_argument("--title", default="", help="plot title (default: what was measured and the load)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    policies = args.policies.split(",")
    load_before = os.getloadavg()[0]
    cpu_before = time.process_time()
    wall_before = time.perf_counter()
    results = [
        measure(policy, n, args.decisions, args.exclude, args.seed) for n in sizes for policy in policies
    ]
    busy = (time.process_time() - cpu_before) / (time.perf_counter() - wall_before)
    load_after = os.getloadavg()[0]
    print(
        f"{args.decisions} decisions per cell, {args.exclude} excluded, window {IN_FLIGHT_WINDOW} in flight; "
        f"load average {load_before:.2f} → {load_after:.2f} on {os.cpu_count()} CPUs, "
        f"this process on CPU {busy:.0%} of the wall time"
    )
    print_table(results, sizes, policies)
    title = (
        args.title
        or f"scheduler decision cost, {args.decisions} decisions per point, load avg {load_before:.1f}"
    )
    plot(results, sizes, policies, args.plot, title)


if __name__ == "__main__":
    main()
