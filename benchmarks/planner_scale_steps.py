"""How long the planner's local scale steps take: an add, a drain-remove and a role conversion under a full
budget, through the path the planner uses (motor.planner.actuate.carry_out with the local actuator, i.e.
`--update-instance-num`'s update_local), on a local sim job with the capacity model, under a light streaming load
(every answer must be whole).

Each round goes 1P+1D → 1P+2D (add decode) → 1P+1D (drain-remove decode) → 2P+1D (add prefill) → 1P+2D (convert
prefill to decode: drain-remove prefill-1, then add decode-1, as a budget of 3 instances requires) → 2P+1D
(convert back) → 1P+1D (drain-remove prefill). A step ends when the job is ready again: the new instances active
at the controller and the coordinator, the removed ones gone. Prints each kind's median, min and max and writes
a plot.

    .venv/bin/python benchmarks/planner_scale_steps.py [--rounds 3] [--no-pool]
"""

import argparse
import asyncio
import datetime
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.plotting import default_plot_path, figure, save, skipped_without_matplotlib
from motor.cli import local_job
from motor.config.models import PlannerConfig
from motor.config.planner import planner_bounds
from motor.planner.actuate import LocalActuator, carry_out
from tests.fixtures.control import LocalRun, sim_config
from tests.fixtures.planner import CAPACITY_MODEL, Load, drop_latency_model

ROUND = (
    ("add decode", (1, 2)),
    ("drain-remove decode", (1, 1)),
    ("add prefill", (2, 1)),
    ("convert prefill → decode", (1, 2)),
    ("convert decode → prefill", (2, 1)),
    ("drain-remove prefill", (1, 1)),
)
BOUNDS = planner_bounds(PlannerConfig(enable=True, max_instances=3), {"prefill": 0, "decode": 0})


def deploy(directory: Path, pool: bool) -> LocalRun:
    engine = {"engine_config": {**CAPACITY_MODEL, "max_num_seqs": 64}}
    config = sim_config(
        directory / "config",
        pool=pool,
        overrides={"motor_engine_prefill_config": engine, "motor_engine_decode_config": engine},
    )
    drop_latency_model(config.doc)
    config.user.write_text(json.dumps(config.doc, indent=2))
    run = LocalRun(config, directory / "run", config.doc["motor_deploy_config"]["job_id"])
    if run.plan_and_deploy() != 0:
        raise SystemExit("the deploy failed")
    return run


async def measure(run: LocalRun, rounds: int) -> tuple[dict[str, list[list[float]]], Load]:
    actuator = LocalActuator(run.run_dir)
    took: dict[str, list[list[float]]] = {kind: [] for kind, _ in ROUND}
    load, stop = Load(clients=2, max_tokens=40, pause_s=0.2), asyncio.Event()
    running = asyncio.create_task(load.run(run.api_url, stop))
    try:
        await asyncio.sleep(2)
        for number in range(rounds):
            for kind, (prefill, decode) in ROUND:
                current = await actuator.counts()
                target = {"prefill": prefill, "decode": decode}
                steps = await carry_out(actuator, current, target, BOUNDS, lambda _: None)  # type: ignore[arg-type]
                took[kind].append(steps)
                print(f"round {number + 1}: {kind:<26} {' + '.join(f'{s:.2f}' for s in steps)} s", flush=True)
    finally:
        stop.set()
        await running
    return took, load


def report(took: dict[str, list[list[float]]], load: Load, loads: tuple[float, float], pool: bool) -> None:
    print(
        f"\nlocal scale steps on the capacity-model sim ({datetime.date.today()}, "
        f"{'with' if pool else 'without'} the KV pool, load average {loads[0]:.1f} before, {loads[1]:.1f} after; "
        f"{load.answered} streams answered during the steps, {len(load.failures)} failed)"
    )
    print("| step | runs | median s | min s | max s | parts (median s) |")
    print("|---|---|---|---|---|---|")
    for kind, runs in took.items():
        totals = [sum(parts) for parts in runs]
        parts = " + ".join(f"{statistics.median(part):.2f}" for part in zip(*runs, strict=True))
        print(
            f"| {kind} | {len(runs)} | {statistics.median(totals):.2f} | {min(totals):.2f} | {max(totals):.2f} "
            f"| {parts} |"
        )
    for failure in load.failures[:5]:
        print(f"failed: {failure}")


@skipped_without_matplotlib
def plot(took: dict[str, list[list[float]]], path: Path) -> None:
    fig, axes = figure(width=8.0)
    ax = axes[0][0]
    kinds = list(took)
    ax.boxplot(
        [[sum(parts) for parts in took[kind]] for kind in kinds], tick_labels=kinds, orientation="horizontal"
    )
    ax.set_xlabel("seconds until the job is ready again")
    ax.set_title("planner scale steps, local sim job")
    save(fig, path)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-pool", action="store_true", help="plain MooncakeConnectorV1, no KV pool")
    parser.add_argument("--plot", type=Path, default=default_plot_path("planner_scale_steps"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="motor-scale-steps-") as directory:
        run = deploy(Path(directory), pool=not args.no_pool)
        try:
            before = os.getloadavg()[0]
            took, load = asyncio.run(measure(run, args.rounds))
            after = os.getloadavg()[0]
        finally:
            local_job.stop(run.run_root, run.job_id, out=open(os.devnull, "w"))  # noqa: SIM115
    report(took, load, (before, after), pool=not args.no_pool)
    plot(took, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
