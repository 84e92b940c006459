"""Chaos under load: every fault of docs/chaos.md, one at a time and then combined, on a real local cluster.

Deploys examples/sim scaled to 2 prefill + 2 decode instances (the real `mooncake_master`, the controller
persisting to a real etcd, a 2-worker coordinator, a blackhole proxy in front of decode-1), drives a bounded
open-loop load (default 50 requests/s: chat and completions, streamed and not, prompts sharing long prefixes so
the pool is used) and injects each fault in turn; then deploys the same cluster with standby controllers and
coordinators and kills their leaders. For each run it prints: requests sent, answered, failed with an explicit
error, lost before their first token, hung, with wrong or repeated tokens, streams cut without an error event,
the time from the fault's end (the kill, or the end of a freeze/blackhole/etcd outage) until the cluster is
whole again, and pool objects whose lease never expired; and the streams the coordinator replayed with their
resume gap (last token before the fault → first token after it, P50/P99). The tests in tests/chaos run the same
harness CI-sized and assert every row. `--no-replay` deploys the plain cluster with reschedule_config off.

    .venv/bin/python benchmarks/chaos.py [--rate 50] [--hold 20] [--faults prefill-kill,master-kill,...]
        [--no-standby] [--no-replay] [--markdown benchmarks/out/chaos.md] [--workdir DIR]

Everything listens on 127.0.0.1 on free ports; every process started here is stopped at the end.
"""

import argparse
import datetime
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from motor.observability.traffic import histogram_quantile
from tests.chaos.cluster import ChaosCluster, ChaosSettings, deploy
from tests.chaos.faults import (
    ComponentKilled,
    EngineFrozen,
    EngineKilled,
    EtcdKilled,
    Fault,
    LeaderKilled,
    PortBlackholed,
    WorkerKilled,
    combined_faults,
)
from tests.chaos.report import RunReport, failures, table
from tests.chaos.run import LoadShape, run_fault

RESUME_GAP = "motor_coordinator_replay_resume_seconds"


def replay_figures(cluster: ChaosCluster) -> tuple[float, dict[float, float]]:
    """(streams resumed, the resume-gap histogram's cumulative buckets) from the coordinator's /metrics."""
    try:
        text = httpx.get(f"{cluster.mgmt_url}/metrics", timeout=5).text
    except httpx.HTTPError:
        return 0.0, {}
    resumed, buckets = 0.0, {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "motor_coordinator_replays_total" and sample.labels.get("outcome") == "resumed":
                resumed += sample.value
            elif sample.name == RESUME_GAP + "_bucket":
                bound = float(sample.labels["le"])
                buckets[bound] = buckets.get(bound, 0.0) + sample.value
    return resumed, buckets


def replay_line(before: tuple[float, dict[float, float]], after: tuple[float, dict[float, float]]) -> str:
    resumed = after[0] - before[0]
    gaps = {bound: count - before[1].get(bound, 0.0) for bound, count in after[1].items()}
    p50, p99 = histogram_quantile(0.5, gaps), histogram_quantile(0.99, gaps)
    if not resumed or p50 is None or p99 is None:
        return f"streams replayed: {resumed:.0f}"
    return f"streams replayed: {resumed:.0f}, resume gap P50 {p50 * 1000:.0f} ms, P99 {p99 * 1000:.0f} ms"


class NoFault(Fault):
    def inject(self, cluster: ChaosCluster) -> None:
        pass


def faults(hold_s: float) -> dict[str, Callable[[], Fault]]:
    """Name → a fresh fault, in the order of docs/chaos.md."""
    return {
        "baseline": lambda: NoFault("no fault (baseline)"),
        "prefill-kill": lambda: EngineKilled("prefill engine SIGKILL mid-prompt", instance="prefill-0"),
        "decode-kill": lambda: EngineKilled("decode engine SIGKILL mid-stream", instance="decode-0"),
        "freeze": lambda: EngineFrozen(
            f"engine frozen (SIGSTOP {hold_s:g} s)", instance="decode-0", hold_s=hold_s
        ),
        "blackhole": lambda: PortBlackholed(f"engine port blackholed {hold_s:g} s", hold_s=hold_s),
        "master-kill": lambda: ComponentKilled("mooncake_master killed", component="kv-pool"),
        "controller-kill": lambda: ComponentKilled("controller killed", component="controller"),
        "node-manager-kill": lambda: ComponentKilled("node manager killed", component="prefill-1"),
        "worker-kill": lambda: WorkerKilled("coordinator worker killed", index=0),
        "etcd-kill": lambda: EtcdKilled(
            f"etcd killed {hold_s / 2:g} s (+ an engine restart)", hold_s=hold_s / 2
        ),
        "combined": lambda: combined_faults("combined: master + controller + 2 engines"),
    }


STANDBY_FAULTS: dict[str, Callable[[], Fault]] = {
    "leader-controller-kill": lambda: LeaderKilled("leader controller killed (standby)", pair="controller"),
    "leader-coordinator-kill": lambda: LeaderKilled(
        "leader coordinator killed (standby)", pair="coordinator"
    ),
}


def run_all(
    workdir: Path,
    settings: ChaosSettings,
    chosen: list[Callable[[], Fault]],
    shape: LoadShape,
    console: Console,
) -> list[RunReport]:
    if not chosen:
        return []
    began = time.monotonic()
    cluster = deploy(workdir, settings)
    console.print(f"deployed in {time.monotonic() - began:.1f} s ({workdir})")
    reports = []
    try:
        for make in chosen:
            fault = make()
            console.print(f"[bold]{fault.name}[/bold] …")
            replays_before = replay_figures(cluster)
            try:
                result = run_fault(cluster, fault, shape)
            except AssertionError as exc:  # the cluster did not recover: say so, keep the rows so far
                console.print(f"  [red]{exc}[/red]")
                break
            reports.append(result.report)
            console.print(f"  {replay_line(replays_before, replay_figures(cluster))}")
            for note in result.report.notes:
                console.print(f"  {note}")
            for line in failures(result.outcomes, limit=5):
                console.print(f"  {line}")
    finally:
        cluster.stop()
    return reports


def markdown(reports: list[RunReport], header: str) -> str:
    lines = [
        header,
        "",
        "| fault | sent | ok | failed (explicit) | lost before 1st token | hung | wrong tokens | cut w/o error "
        "| recovered in | keys leaked | slowest |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in reports:
        recovered = "—" if r.recovery_s is None else f"{r.recovery_s:.1f} s"
        lines.append(
            f"| {r.fault} | {r.sent} | {r.succeeded} | {r.failed_explicit} | {r.lost_before_first_token} | "
            f"{r.hung} | {r.wrong_tokens} | {r.cut} | {recovered} | {r.keys_leaked} | {r.slowest_s:.1f} s |"
        )
    notes = [note for r in reports for note in r.notes]
    if notes:
        lines += ["", *(f"- {note}" for note in notes)]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=float, default=50.0, help="requests per second (open loop)")
    parser.add_argument("--hold", type=float, default=20.0, help="seconds a freeze or a blackhole lasts")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--tail", type=float, default=5.0, help="seconds of load after the cluster recovered")
    parser.add_argument(
        "--faults",
        default="",
        help="comma-separated subset of: " + ", ".join([*faults(20.0), *STANDBY_FAULTS]),
    )
    parser.add_argument("--no-standby", action="store_true", help="skip the standby cluster")
    parser.add_argument("--no-replay", action="store_true", help="reschedule_config off on the plain cluster")
    parser.add_argument("--markdown", type=Path, help="also write the table as Markdown to this file")
    parser.add_argument(
        "--workdir", type=Path, help="where the clusters run (default: a temporary directory)"
    )
    args = parser.parse_args()

    console = Console(width=180)
    everything = {**faults(args.hold), **({} if args.no_standby else STANDBY_FAULTS)}
    wanted = [name.strip() for name in args.faults.split(",") if name.strip()] or list(everything)
    unknown = sorted(set(wanted) - set(everything))
    if unknown:
        parser.error(f"unknown faults {unknown}; choose from {list(everything)}")
    shape = LoadShape(rate=args.rate, warmup_s=args.warmup, tail_s=args.tail, recovery_timeout_s=120.0)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="motor-chaos-"))
    load_before = os.getloadavg()
    started = datetime.datetime.now().astimezone()

    reports = run_all(
        workdir / "plain",
        ChaosSettings(replay=not args.no_replay),
        [make for name, make in faults(args.hold).items() if name in wanted],
        shape,
        console,
    )
    reports += run_all(
        workdir / "standby",
        ChaosSettings(standby=True, blackholed=None),
        [make for name, make in STANDBY_FAULTS.items() if name in wanted and not args.no_standby],
        shape,
        console,
    )
    load_after = os.getloadavg()
    header = (
        f"chaos run {started:%Y-%m-%d %H:%M %Z}: {args.rate:g} requests/s open loop, freeze/blackhole {args.hold:g} s, "
        f"{os.cpu_count()} cores, load average {load_before[0]:.1f} before / {load_after[0]:.1f} after"
    )
    console.print(table(reports, header))
    if args.markdown is not None:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(markdown(reports, header))
        console.print(f"Markdown table: {args.markdown}")
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if any(report.violations for report in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
