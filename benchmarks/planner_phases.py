"""The SLO planner against every static split of the same budget, over one workload whose phases want
different splits (issue 26's measure; docs/planner.md).

The cluster: a local sim job deployed by motor's local path (the plan and the job supervisor `motor deploy`
starts), `BUDGET` instances, the KV pool on, every engine the sim's capacity model (`ENGINE_MODEL`: prefill
4,000 tokens/s; a decode step of 20 ms + 3 ms per sequence, so 10 sequences and 200 tokens/s per instance
within the 50 ms ITL objective) with 16 real KV bytes per token, so that the sims' own CPU stays low.

The workload (`make_schedule`, seeded, the same for every run): a warm-up (`--warm-up-seconds`, light mixed
traffic with answers of many lengths, not measured: the planner has measured its engines when the phases
start), then `PHASES`, `--phase-seconds` each, open loop, single requests with fresh random prompts (nothing
cached), arrivals in bursts (gamma inter-arrival times, CV 1.5), `ignore_eos` so that every answer has its
max_tokens:
- prompt-heavy: 8 requests/s, prompts of ~2,000 tokens, answers of ~16;
- answer-heavy: 8 requests/s, prompts of ~100 tokens, answers of ~120;
- mixed: 10 requests/s, prompts of ~700 tokens, answers of ~60, and 10 s at 1.6 times that rate.
`print_predictions` works out from the capacity model how well each split covers each phase (the instances a
role needs at the model's capacity, as the planner's decision works them out at 100 % utilisation, against the
split's count): the split whose worse-covered role is covered best is the phase's predicted best, those
covering both roles are predicted to serve it.

The runs, one after the other, each on a freshly deployed job (prompts salted per run):
- the planner (`PLANNER`: `fill_budget`, a decision every second over the traffic of the last 8 s, cooldown
  3 s) starting from an even split; with `--fewest` also the planner without fill_budget (the fewest instances
  that meet the needs);
- every static split of the budget (`--splits`, 1P+7D … 7P+1D) without a planner, over the same schedule;
- each phase alone after the warm-up on each split predicted to serve it (`--no-alone` leaves them out): the
  phase's reference, with no backlog of an earlier phase (in the whole schedule a static split that serves one
  phase carries the previous phase's overload into it).

Goodput: requests that met TTFT ≤ 2 s and TPOT ≤ 50 ms (the mean time per output token of each request,
DistServe's rule), per second of the schedule; every request sent counts (errors and timeouts are misses; the
coordinator ends a request after `INFER_TIMEOUT_S`). The stricter rule motor's cluster benchmark uses, each
request's own ITL P99 within the objective, is printed beside it for the whole run: on a loaded 2-core machine
one late wake-up of an engine decides it. Per run: over the whole run, per phase (a request belongs to the
phase it was sent in), and in the first 30 s of each phase; the errors; for a planner run its changes from its
journal (start, end, steps, reason) and the requests that failed while one was carried out (lost to a scale
event). Then: the planner's goodput over the best static split in hindsight (the whole run); per phase, the
planner's goodput in its first 30 s over the best phase-alone reference's first 30 s (and over the best static
split's in the same 30 s of the whole schedule); changes per phase. Whether the machine kept up, per run: the
load average before and after, the load generator's send lag P99 and the job's share of a core; for a planner
run, the decode step it fitted against the model's. Each run's records go to `--keep`/runs.json as it ends
(with the planner's log and journal); `--reuse FILE` reports the runs of an earlier invocation of the same
schedule beside this one's. A plot (instances per role and goodput over time for the planner, the best static
split's goodput beside it) goes to `--plot`.

    .venv/bin/python benchmarks/planner_phases.py [--phase-seconds 75] [--warm-up-seconds 20]
        [--splits 1,2,...,7] [--no-planner] [--fewest] [--no-alone] [--seed 1] [--plot PATH]
        [--keep DIR] [--reuse FILE]

Everything listens on 127.0.0.1 on free ports; every job deployed here is stopped at the end of its run.
"""

import argparse
import asyncio
import contextlib
import dataclasses
import datetime
import json
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cluster_scheduling import (
    Outcome,
    Turn,
    _client,
    _lognormal,
    _words,
    percentile,
    send,
    tree_cpu_seconds,
)
from plotting import OUT_DIR, default_plot_path, figure, save, skipped_without_matplotlib

from motor.cli import local_job
from motor.config.models import PlannerConfig
from motor.config.planner import PLANNED_ROLES, PlannedRole, planner_bounds
from motor.engine.sim.capacity import CapacityModel
from motor.planner.decide import Figures, role_needs
from tests.fixtures.control import ConfigPair, LocalRun, sim_config
from tests.fixtures.planner import drop_latency_model, give_planner_port

Counts = dict[PlannedRole, int]

BUDGET = 8
TTFT_SLO_S = 2.0
ITL_SLO_S = 0.05
FIRST_S = 30.0  # the window after a phase change
BIN_S = 5.0  # goodput over time, in the plot
INFER_TIMEOUT_S = 40  # a request within both objectives ends within 2 s + 400 tokens × 50 ms
MODEL_NAME = "sim-model"
ENGINE_MODEL = CapacityModel(
    enabled=True,
    prefill_tokens_per_s=4000,
    max_num_batched_tokens=2048,
    step_overhead_ms=20,
    decode_ms_per_seq=3,
    decode_ms_per_1k_context=0,
)
ENGINE_CONFIG: dict[str, Any] = {
    "capacity_model": True,
    "prefill_tokens_per_s": ENGINE_MODEL.prefill_tokens_per_s,
    "max_num_batched_tokens": ENGINE_MODEL.max_num_batched_tokens,
    "step_overhead_ms": ENGINE_MODEL.step_overhead_ms,
    "decode_ms_per_seq": ENGINE_MODEL.decode_ms_per_seq,
    "decode_ms_per_1k_context": ENGINE_MODEL.decode_ms_per_1k_context,
    "kv_bytes_per_token": 16,  # the real bytes the sims hash and put in the pool: cheap
    "max_num_seqs": 64,
    "max_model_len": 4096,
}
PLANNER: dict[str, Any] = {
    "enable": True,
    "max_instances": BUDGET,
    "ttft_slo_ms": TTFT_SLO_S * 1000,
    "itl_slo_ms": ITL_SLO_S * 1000,
    "interval_s": 1.0,
    "window_s": 8.0,
    "cooldown_s": 3.0,
    "scale_down_intervals": 2,
    "max_changes_per_minute": 6,
    "fill_budget": True,  # the budget is paid for: all of it split by need (else the fewest that suffice)
}


@dataclass(frozen=True)
class Phase:
    name: str
    rate: float  # requests/s on average
    prompt: tuple[int, float, int]  # tokens: lognormal median, sigma, cap
    answer: tuple[int, float, int]
    burst: tuple[float, float, float] | None = None  # seconds into the phase, seconds long, rate factor


PHASES = (
    Phase("prompt-heavy", 8.0, (2000, 0.35, 3800), (16, 0.3, 48)),
    Phase("answer-heavy", 8.0, (100, 0.5, 400), (120, 0.35, 400)),
    Phase("mixed", 10.0, (700, 0.4, 3000), (60, 0.4, 300), burst=(40.0, 10.0, 1.6)),
)
BURST_CV = 1.5  # of the inter-arrival times (1: Poisson)
# before the phases, not measured: light mixed traffic with answers of many lengths, so that the planner has
# measured its engines (a decode step line needs batches of several sizes) when the phases start
WARM_UP = Phase("warm-up", 3.0, (700, 0.4, 3000), (60, 0.9, 300))


# ---- workload and predictions (pure) -----------------------------------------------------------------------


def make_schedule(phases: Sequence[Phase], phase_s: float, seed: int, warm_up_s: float = 0.0) -> list[Turn]:
    """Every request of the run, sorted by the time it is sent (seconds from the first phase's start; the
    warm-up's before 0); `Turn.session` is its phase's index, -1 for the warm-up. The phases' requests do not
    depend on the warm-up."""
    turns: list[Turn] = []
    if warm_up_s > 0:
        warm_up = random.Random(f"planner-phases-warm-up:{seed}:{warm_up_s}")
        _add_phase(turns, warm_up, WARM_UP, -1, -warm_up_s, warm_up_s)
    rng = random.Random(f"planner-phases:{seed}:{phase_s}")
    for index, phase in enumerate(phases):
        _add_phase(turns, rng, phase, index, index * phase_s, phase_s)
    return turns


def _add_phase(
    turns: list[Turn], rng: random.Random, phase: Phase, index: int, start: float, seconds: float
) -> None:
    shape = 1 / BURST_CV**2
    at = 0.0
    while True:
        rate = phase.rate
        if phase.burst is not None and phase.burst[0] <= at < phase.burst[0] + phase.burst[1]:
            rate *= phase.burst[2]
        at += rng.gammavariate(shape, 1 / (rate * shape))
        if at >= seconds:
            return
        prompt = _words(rng, _lognormal(rng, *phase.prompt))
        turns.append(Turn(start + at, index, len(turns), prompt, _lognormal(rng, *phase.answer)))


def alone(turns: Sequence[Turn], phase: int, phase_s: float) -> list[Turn]:
    """The warm-up, then phase `phase`'s requests alone, from 0."""
    shift = phase * phase_s
    return [t for t in turns if t.session < 0] + [
        dataclasses.replace(t, at_s=t.at_s - shift) for t in turns if t.session == phase
    ]


def split_name(counts: Counts) -> str:
    return f"{counts['prefill']}P+{counts['decode']}D"


def static_splits(budget: int) -> list[Counts]:
    return [{"prefill": p, "decode": budget - p} for p in range(1, budget)]


def model_figures(turns: Sequence[Turn], seconds: float, model: CapacityModel, itl_s: float) -> Figures:
    """What the planner would measure on engines timed by `model` under `turns`, exactly."""
    batch = (itl_s * 1000 - model.step_overhead_ms) / model.decode_ms_per_seq
    return Figures(
        counts={"prefill": 0, "decode": 0},
        active={"prefill": 0, "decode": 0},
        arrival_rate=len(turns) / seconds,
        prompt_tokens=statistics.fmean(len(t.prompt_words) + 1 for t in turns),  # + the salt
        output_tokens=statistics.fmean(t.max_tokens for t in turns),
        prefill_tokens_per_s=model.prefill_tokens_per_s,
        decode_tokens_per_s=batch / itl_s,
        decode_batch=batch,
    )


def predicted_need(turns: Sequence[Turn], seconds: float) -> dict[PlannedRole, float]:
    """The instances each role needs for `turns` at the model's capacity, fully used (the prefill side as busy
    as a prompt's wait allows within the TTFT objective)."""
    config = PlannerConfig(
        enable=True,
        max_instances=BUDGET,
        ttft_slo_ms=TTFT_SLO_S * 1000,
        itl_slo_ms=ITL_SLO_S * 1000,
        max_utilization=1.0,
    )
    bounds = planner_bounds(config, {"prefill": 0, "decode": 0})
    needs, why = role_needs(model_figures(turns, seconds, ENGINE_MODEL, ITL_SLO_S), config, bounds)
    assert needs is not None, why
    return needs.traffic


def coverage(split: Counts, need: dict[PlannedRole, float]) -> float:
    """The worse-covered role's count over its need."""
    return min(split[role] / need[role] if need[role] > 0 else math.inf for role in PLANNED_ROLES)


# ---- one run -----------------------------------------------------------------------------------------------


@dataclass
class Sent:
    turn: Turn
    sent_s: float  # since the schedule's start
    ended_s: float
    outcome: Outcome


@dataclass
class Change:
    at_s: float
    kind: str
    before: Counts
    targets: Counts
    reason: str
    ended_s: float | None = None
    steps_s: list[float] = field(default_factory=list)
    error: str = ""


@dataclass
class Look:
    """The planner's status at one second of the run."""

    at_s: float
    counts: Counts
    active: Counts
    need: dict[str, float] | None


@dataclass
class Run:
    name: str
    sent: list[Sent]
    looks: list[Look]
    changes: list[Change]
    loads: tuple[float, float]
    job_cpu: float  # share of a core, over the schedule
    notes: list[str]  # the planner's, at the end: how it measured the capacities
    # the phase it played alone (its requests' times from that phase's start); None: all of them
    alone: int | None = None

    @property
    def planned(self) -> bool:
        return self.name.startswith("planner")

    def goodput(self, begin: float = 0.0, end: float = math.inf, rule: str = "TPOT") -> float:
        """Requests sent in [begin, end) that met both objectives, per second."""
        good = sum(within_slo(s.outcome, rule) for s in self.sent if begin <= s.turn.at_s < end)
        return good / (end - begin)

    def failed(self) -> list[Sent]:
        return [s for s in self.sent if not s.outcome.ok]

    def lost_to_changes(self) -> list[Sent]:
        """Failed requests in flight while a change was carried out."""
        return [
            s
            for s in self.failed()
            if any(
                s.sent_s < (change.ended_s if change.ended_s is not None else math.inf)
                and s.ended_s > change.at_s
                for change in self.changes
            )
        ]


def within_slo(outcome: Outcome, rule: str = "TPOT") -> bool:
    """Answered whole within the TTFT objective, and its mean time per output token (TPOT, DistServe's rule;
    `rule` "P99": its own ITL P99 instead, which one late wake-up of a starved engine decides) within the ITL
    objective."""
    if not outcome.ok or outcome.ttft_s > TTFT_SLO_S:
        return False
    if not outcome.gaps_s:
        return True
    itl = statistics.fmean(outcome.gaps_s) if rule == "TPOT" else percentile(outcome.gaps_s, 0.99)
    return itl <= ITL_SLO_S


def job_config(directory: Path, split: Counts, planner: dict[str, Any] | None) -> ConfigPair:
    """examples/sim with `split`, the capacity-model engines, its ports moved to a free block, and the planner
    configured by `planner` (None: none)."""
    engine = {"engine_config": ENGINE_CONFIG}
    overrides: dict[str, Any] = {
        "motor_deploy_config": {"p_instances_num": split["prefill"], "d_instances_num": split["decode"]},
        "motor_coordinator_config": {"exception_config": {"infer_timeout": INFER_TIMEOUT_S}},
        "motor_engine_prefill_config": engine,
        "motor_engine_decode_config": engine,
    }
    if planner is not None:
        overrides["motor_planner_config"] = planner
    config = sim_config(directory, overrides=overrides, instances=BUDGET)
    drop_latency_model(config.doc)
    if planner is not None:
        give_planner_port(config.doc)
    config.user.write_text(json.dumps(config.doc, indent=2))
    return config


async def play(url: str, turns: Sequence[Turn], salt: str, began: float) -> list[Sent]:
    """Send `turns` on their schedule (open loop) from `began` (perf_counter, the schedule's 0), streamed;
    every request as the client saw it."""
    extra = {"model": MODEL_NAME, "stream_options": {"include_usage": True}}
    async with _client() as session:
        start = began

        async def one(turn: Turn) -> Sent:
            await asyncio.sleep(max(0.0, start + turn.at_s - time.perf_counter()))
            sent = time.perf_counter() - start
            outcome = await send(session, url, turn, salt, extra)
            outcome.late_s = sent - turn.at_s
            return Sent(turn, sent, time.perf_counter() - start, outcome)

        return list(await asyncio.gather(*(one(turn) for turn in turns)))


async def watch(url: str, began: float, looks: list[Look], stop: asyncio.Event) -> None:
    """The planner's status every second until `stop` (a look it did not answer is skipped)."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
        while not stop.is_set():
            try:
                async with session.get(f"{url}/planner/status") as response:
                    status = await response.json()
                looks.append(Look(time.time() - began, status["counts"], status["active"], status["need"]))
            except (aiohttp.ClientError, TimeoutError, ValueError, KeyError):
                pass
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)


async def play_and_watch(
    api_url: str, planner_url: str | None, turns: Sequence[Turn], salt: str
) -> tuple[float, list[Sent], list[Look]]:
    """The schedule's start (epoch seconds), every request sent, and the planner's status over the run."""
    looks: list[Look] = []
    stop = asyncio.Event()
    lead = max(0.0, -min(turn.at_s for turn in turns))  # the warm-up's
    began = time.time() + lead
    watching = asyncio.create_task(watch(planner_url, began, looks, stop)) if planner_url else None
    try:
        sent = await play(api_url, turns, salt, time.perf_counter() + lead)
    finally:
        stop.set()
        if watching is not None:
            await watching
    return began, sent, looks


def journal_changes(path: Path, began: float) -> list[Change]:
    """The changes the planner's journal records, with their outcomes, in seconds since `began`."""
    changes: list[Change] = []
    for line in path.read_text().splitlines() if path.exists() else []:
        entry = json.loads(line)
        at = entry["at"] - began
        if entry["event"] == "change":
            changes.append(Change(at, entry["kind"], entry["from"], entry["targets"], entry["reason"]))
        elif entry["event"] in ("done", "failed") and changes:
            changes[-1].ended_s = at
            changes[-1].steps_s = entry.get("seconds", [])
            changes[-1].error = entry.get("error", "")
    return changes


def measure(
    name: str, split: Counts, planner: dict[str, Any] | None, turns: Sequence[Turn], salt: str, keep: Path
) -> Run:
    """Deploy a fresh job at `split` (with the planner configured by `planner`), play the schedule, stop the
    job."""
    with tempfile.TemporaryDirectory(prefix="motor-planner-phases-") as directory:
        config = job_config(Path(directory) / "config", split, planner)
        run = LocalRun(config, Path(directory) / "run", config.doc["motor_deploy_config"]["job_id"])
        keep.mkdir(parents=True, exist_ok=True)
        planner_url = None
        if planner is not None:
            planner_url = (
                f"http://127.0.0.1:{config.doc['motor_planner_config']['api_config']['planner_api_port']}"
            )
        try:
            with (keep / f"{name}.deploy.log").open("w") as log, contextlib.redirect_stdout(log):
                deployed = run.plan_and_deploy(ready_timeout=180)
            if deployed != 0:
                raise SystemExit(f"{name}: the deploy failed (see {keep / f'{name}.deploy.log'})")
            supervisor = run.state()["supervisor"]["pid"]
            load_before, cpu_before, clock = (
                os.getloadavg()[0],
                tree_cpu_seconds(supervisor),
                time.monotonic(),
            )
            began, sent, looks = asyncio.run(play_and_watch(run.api_url, planner_url, turns, salt))
            sent = [s for s in sent if s.turn.session >= 0]  # the warm-up is not measured
            job_cpu = (tree_cpu_seconds(supervisor) - cpu_before) / (time.monotonic() - clock)
            loads = (load_before, os.getloadavg()[0])
            journal = run.run_dir / "planner" / "changes.jsonl"
            changes = journal_changes(journal, began) if planner is not None else []
            notes = []
            if planner_url is not None:
                with urllib.request.urlopen(f"{planner_url}/planner/status", timeout=5) as response:
                    notes = json.loads(response.read())["notes"]
                shutil.copy(journal, keep / f"{name}.changes.jsonl")
                shutil.copy(run.run_dir / "logs" / "planner.log", keep / f"{name}.log")
        finally:
            with open(os.devnull, "w") as devnull:
                local_job.stop(run.run_root, run.job_id, out=devnull)
    return Run(name, sent, looks, changes, loads, job_cpu, notes)


# ---- report ------------------------------------------------------------------------------------------------


def phase_of(at_s: float, phase_s: float) -> int:
    return min(int(at_s // phase_s), len(PHASES) - 1)


def print_predictions(
    turns: Sequence[Turn], phase_s: float
) -> tuple[dict[int, Counts], dict[int, list[Counts]]]:
    """Each split's coverage of each phase from the capacity model; per phase, the predicted best split and
    the splits predicted to serve it (coverage ≥ 1)."""
    print(
        f"\npredicted from the capacity model: the instances each role needs (at the model's capacity, the "
        f"prefill side as busy as a wait within TTFT {TTFT_SLO_S:g} s allows) and each split's coverage "
        "(the worse-covered role's count / need; below 1 it cannot keep up)"
    )
    best: dict[int, Counts] = {}
    serving: dict[int, list[Counts]] = {}
    splits = static_splits(BUDGET)
    print(f"| phase | sent/s | prompt | answer | need P | need D | {' | '.join(map(split_name, splits))} |")
    print(f"|---|---|---|---|---|---|{'---|' * len(splits)}")
    for index, phase in enumerate(PHASES):
        mine = [t for t in turns if t.session == index]
        need = predicted_need(mine, phase_s)
        covered = [coverage(split, need) for split in splits]
        best[index] = splits[covered.index(max(covered))]
        serving[index] = [split for split, c in zip(splits, covered, strict=True) if c >= 1.0]
        cells = " | ".join(
            f"**{c:.2f}**" if split == best[index] else f"{c:.2f}"
            for split, c in zip(splits, covered, strict=True)
        )
        print(
            f"| {phase.name} | {len(mine) / phase_s:.1f} "
            f"| {statistics.fmean(len(t.prompt_words) for t in mine):.0f} "
            f"| {statistics.fmean(t.max_tokens for t in mine):.0f} "
            f"| {need['prefill']:.2f} | {need['decode']:.2f} | {cells} |"
        )
    return best, serving


def error_kinds(run: Run) -> str:
    kinds: dict[str, int] = {}
    for sent in run.failed():
        kind = sent.outcome.error if not sent.outcome.error.endswith("tokens") else "stream cut short"
        kinds[kind] = kinds.get(kind, 0) + 1
    return ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items())) or "0"


def print_runs(runs: Sequence[Run], phase_s: float) -> None:
    print(
        f"\ngoodput (requests/s within TTFT ≤ {TTFT_SLO_S:g} s and TPOT ≤ {ITL_SLO_S * 1000:g} ms, every "
        f"request sent counted), over the run, per phase ({phase_s:g} s each) and in each phase's first "
        f"{FIRST_S:g} s; whole, P99 rule: a request's own ITL P99 within the objective instead of its TPOT; "
        "late: the client's send lag P99; job CPU: share of a core"
    )
    names = [phase.name for phase in PHASES]
    header = ["run", "whole", *names, *(f"{n} first {FIRST_S:g} s" for n in names), "whole, P99 rule"]
    header += ["TTFT P99 ms", "ITL P99 ms", "errors", "late ms", "job CPU", "load before/after"]
    print(f"| {' | '.join(header)} |\n|{'---|' * len(header)}")
    for run in runs:
        ok = [s.outcome for s in run.sent if s.outcome.ok]
        cells = [run.name, f"{run.goodput(0, len(PHASES) * phase_s):.2f}"]
        cells += [f"{run.goodput(k * phase_s, (k + 1) * phase_s):.2f}" for k in range(len(PHASES))]
        cells += [f"{run.goodput(k * phase_s, k * phase_s + FIRST_S):.2f}" for k in range(len(PHASES))]
        cells += [
            f"{run.goodput(0, len(PHASES) * phase_s, rule='P99'):.2f}",
            f"{percentile([o.ttft_s for o in ok], 0.99) * 1000:.0f}",
            f"{percentile([g for o in ok for g in o.gaps_s], 0.99) * 1000:.0f}",
            error_kinds(run),
            f"{percentile([s.outcome.late_s for s in run.sent], 0.99) * 1000:.0f}",
            f"{run.job_cpu:.0%}",
            f"{run.loads[0]:.1f} / {run.loads[1]:.1f}",
        ]
        print(f"| {' | '.join(cells)} |")


def print_changes(run: Run, phase_s: float) -> None:
    print(f"\nthe planner's changes (seconds since the schedule's start; phases change every {phase_s:g} s)")
    print("| at s | phase | change | done s | steps s | reason |\n|---|---|---|---|---|---|")
    for c in run.changes:
        done = f"{c.ended_s:.1f}" if c.ended_s is not None else "-"
        steps = " + ".join(f"{s:.1f}" for s in c.steps_s) or c.error or "-"
        print(
            f"| {c.at_s:.1f} | {PHASES[phase_of(c.at_s, phase_s)].name} | {c.kind} {split_name(c.before)} → "
            f"{split_name(c.targets)} | {done} | {steps} | {c.reason} |"
        )
    for note in run.notes:
        print(f"planner's capacities at the end: {note}")
    model_batch = (ITL_SLO_S * 1000 - ENGINE_MODEL.step_overhead_ms) / ENGINE_MODEL.decode_ms_per_seq
    print(
        f"the model: decode step {ENGINE_MODEL.step_overhead_ms:g} ms + {ENGINE_MODEL.decode_ms_per_seq:g} "
        f"ms/sequence, {model_batch:.1f} sequences within ITL {ITL_SLO_S * 1000:g} ms; prefill "
        f"{ENGINE_MODEL.prefill_tokens_per_s:,.0f} tokens/s"
    )


def print_alone(runs: Sequence[Run], phase_s: float) -> None:
    print(
        "\neach phase alone after the warm-up on a split that should serve it (the phase's reference, with "
        f"no earlier phase's backlog): goodput over the phase and its first {FIRST_S:g} s"
    )
    print(
        f"| run | phase | first {FIRST_S:g} s | TTFT P99 ms | ITL P99 ms | errors | late ms | job CPU "
        "| load |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for run in runs:
        ok = [s.outcome for s in run.sent if s.outcome.ok]
        print(
            f"| {run.name} | {run.goodput(0, phase_s):.2f} | {run.goodput(0, FIRST_S):.2f} "
            f"| {percentile([o.ttft_s for o in ok], 0.99) * 1000:.0f} "
            f"| {percentile([g for o in ok for g in o.gaps_s], 0.99) * 1000:.0f} | {error_kinds(run)} "
            f"| {percentile([s.outcome.late_s for s in run.sent], 0.99) * 1000:.0f} | {run.job_cpu:.0%} "
            f"| {run.loads[0]:.1f} / {run.loads[1]:.1f} |"
        )


def ratio(mine: float, theirs: float, style: str = ".0%") -> str:
    return format(mine / theirs, style) if theirs > 0 else "-"


def print_summary(
    planner: Run, statics: Sequence[Run], alones: Sequence[Run], predicted: dict[int, Counts], phase_s: float
) -> None:
    end = len(PHASES) * phase_s
    best = max(statics, key=lambda run: run.goodput(0, end))
    mine, theirs = planner.goodput(0, end), best.goodput(0, end)
    print(
        f"\nwhole run: {planner.name} {mine:.2f} requests/s, the best static split {best.name} {theirs:.2f}: "
        f"{ratio(mine, theirs, '.2f')}× (goal ≥ 1.2×)"
    )
    print(
        f"| phase | predicted best | best static in the run: phase, first {FIRST_S:g} s | best alone: phase, "
        f"first {FIRST_S:g} s | planner: phase, first {FIRST_S:g} s | planner's first {FIRST_S:g} s / best "
        f"alone's (goal ≥ 90 %) | / best in the run's | changes |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for k, phase in enumerate(PHASES):
        begin, until = k * phase_s, (k + 1) * phase_s
        top = max(statics, key=lambda run: run.goodput(begin, until))
        first, in_run = planner.goodput(begin, begin + FIRST_S), top.goodput(begin, begin + FIRST_S)
        cells = [
            phase.name,
            split_name(predicted[k]),
            f"{top.name} {top.goodput(begin, until):.2f}, {in_run:.2f}",
        ]
        reference = max(
            (run for run in alones if run.alone == k), key=lambda run: run.goodput(0, phase_s), default=None
        )
        if reference is None:
            cells.append("-")
        else:
            alone_first = reference.goodput(0, FIRST_S)
            cells.append(
                f"{reference.name.split()[0]} {reference.goodput(0, phase_s):.2f}, {alone_first:.2f}"
            )
        cells.append(f"{planner.goodput(begin, until):.2f}, {first:.2f}")
        cells.append(ratio(first, alone_first) if reference is not None else "-")
        cells.append(ratio(first, in_run))
        cells.append(str(sum(1 for c in planner.changes if begin <= c.at_s < until)))
        print(f"| {' | '.join(cells)} |")
    failed, lost = planner.failed(), planner.lost_to_changes()
    print(
        f"{planner.name}: {len(planner.sent)} requests sent, {len(failed)} failed ({error_kinds(planner)}), "
        f"{len({id(s) for s in lost})} of them while a change was carried out (lost to a scale event; goal 0)"
    )


# ---- plot --------------------------------------------------------------------------------------------------


def binned_goodput(run: Run, end: float) -> tuple[list[float], list[float]]:
    edges = [k * BIN_S for k in range(math.ceil(end / BIN_S))]
    return [t + BIN_S / 2 for t in edges], [run.goodput(t, t + BIN_S) for t in edges]


@skipped_without_matplotlib
def plot(planner: Run, statics: Sequence[Run], alones: Sequence[Run], phase_s: float, path: Path) -> None:
    end = len(PHASES) * phase_s
    fig, axes = figure(2, 1, width=9.0, height=3.6)
    counts, rate = axes[0][0], axes[1][0]
    at = [look.at_s for look in planner.looks]
    for role, color in (("prefill", "tab:blue"), ("decode", "tab:orange")):
        counts.step(at, [look.counts[role] for look in planner.looks], where="post", color=color, label=role)
        need = [look.need[role] if look.need else math.nan for look in planner.looks]
        counts.plot(at, need, ":", color=color, label=f"{role}: the planner's need now")
    counts.set(
        ylabel="instances",
        ylim=(0, BUDGET + 1),
        title=f"{planner.name}, budget {BUDGET}: instances per role (needs above {BUDGET + 1} cut)",
    )
    best = max(statics, key=lambda run: run.goodput(0, end))
    for run, style in ((planner, "-"), (best, "--")):
        centres, values = binned_goodput(run, end)
        label = planner.name if run is planner else f"the best static split over the run ({best.name})"
        rate.plot(centres, values, style, drawstyle="steps-mid", label=label)
    for k in range(len(PHASES)):
        # each phase's reference: alone on its best split (else that phase's best static split in the run)
        mine = [run for run in alones if run.alone == k]
        top = max(mine or statics, key=lambda run: run.goodput(*phase_window(run, k, phase_s)))
        begin = 0.0 if top.alone is not None else k * phase_s
        centres, values = binned_goodput(top, begin + phase_s)
        window = [(c - begin + k * phase_s, v) for c, v in zip(centres, values, strict=True) if c >= begin]
        label = "each phase alone on its best split" if mine else "each phase's best static split"
        rate.plot(*zip(*window, strict=True), ":", color="gray", label=label if k == 0 else None)
        rate.annotate(top.name.split()[0], window[0], fontsize=7, color="gray")
    centres, _ = binned_goodput(planner, end)
    offered = [
        sum(1 for s in planner.sent if t - BIN_S / 2 <= s.turn.at_s < t + BIN_S / 2) / BIN_S for t in centres
    ]
    rate.plot(centres, offered, color="lightgray", drawstyle="steps-mid", label="requests sent")
    rate.set(xlabel="seconds", ylabel="requests/s", title=f"goodput over {BIN_S:g} s bins (by send time)")
    for axis in (counts, rate):
        for k, phase in enumerate(PHASES):
            axis.axvline(k * phase_s, color="black", linewidth=0.5)
            axis.text(k * phase_s + 1, axis.get_ylim()[1] * 0.93, phase.name, fontsize=7)
        axis.legend(fontsize=7, loc="upper right")
    save(fig, path)


def phase_window(run: Run, phase: int, phase_s: float) -> tuple[float, float]:
    """Where phase `phase`'s requests are in `run`'s times."""
    begin = 0.0 if run.alone is not None else phase * phase_s
    return begin, begin + phase_s


def commit() -> str:
    found = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    return found.stdout.strip() or "?"


def save_records(runs: Sequence[Run], path: Path, schedule: dict[str, float]) -> None:
    """Every run's records as JSON (a later invocation may `--reuse` them for the same schedule)."""
    records = [
        {
            **{key: value for key, value in dataclasses.asdict(run).items() if key != "sent"},
            "sent": [
                [s.turn.index, s.turn.at_s, s.sent_s, s.ended_s, dataclasses.asdict(s.outcome)]
                for s in run.sent
            ],
        }
        for run in runs
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schedule": schedule, "runs": records}))


def load_records(path: Path, turns: Sequence[Turn], schedule: dict[str, float]) -> list[Run]:
    """The runs `save_records` wrote for the same schedule."""
    saved = json.loads(path.read_text())
    if saved["schedule"] != schedule:
        raise SystemExit(f"{path}: recorded for another schedule, {saved['schedule']}")
    return [
        Run(
            name=record["name"],
            sent=[
                Sent(dataclasses.replace(turns[index], at_s=at), sent, ended, Outcome(**outcome))
                for index, at, sent, ended, outcome in record["sent"]
            ],
            looks=[Look(**look) for look in record["looks"]],
            changes=[Change(**change) for change in record["changes"]],
            loads=tuple(record["loads"]),  # type: ignore[arg-type]
            job_cpu=record["job_cpu"],
            notes=record["notes"],
            alone=record["alone"],
        )
        for record in saved["runs"]
    ]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--phase-seconds", type=float, default=75.0)
    parser.add_argument(
        "--warm-up-seconds", type=float, default=20.0, help="light traffic first, not measured"
    )
    parser.add_argument("--splits", default=",".join(str(p) for p in range(1, BUDGET)), help="prefill counts")
    parser.add_argument("--no-planner", action="store_true")
    parser.add_argument("--no-alone", action="store_true", help="no phase-alone reference runs")
    parser.add_argument(
        "--fewest", action="store_true", help="also the planner without fill_budget (the fewest instances)"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--plot", type=Path, default=default_plot_path("planner_phases"))
    parser.add_argument("--keep", type=Path, default=OUT_DIR / "planner_phases", help="logs and records here")
    parser.add_argument(
        "--reuse",
        type=Path,
        action="append",
        default=[],
        help="records of an earlier invocation (same schedule): its runs not measured here are reported too",
    )
    args = parser.parse_args()
    # a kill ends the run through measure's cleanup (the job it deployed is stopped)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    phase_s = args.phase_seconds
    turns = make_schedule(PHASES, phase_s, args.seed, args.warm_up_seconds)
    schedule = {"phase_s": phase_s, "seed": args.seed, "warm_up_s": args.warm_up_seconds}
    phase_requests = sum(1 for turn in turns if turn.session >= 0)
    print(
        f"planner_phases {datetime.date.today()}, commit {commit()}, budget {BUDGET}, {phase_requests} "
        f"requests over {len(PHASES)} phases of {phase_s:g} s after a {args.warm_up_seconds:g} s warm-up of "
        f"{len(turns) - phase_requests}, seed {args.seed}, load average {os.getloadavg()[0]:.1f}"
    )
    predicted, serving = print_predictions(turns, phase_s)
    even: Counts = {"prefill": BUDGET // 2, "decode": BUDGET - BUDGET // 2}
    plans: list[tuple[str, Counts, dict[str, Any] | None, int | None]] = []
    if not args.no_planner:
        plans.append(("planner", even, PLANNER, None))
    if args.fewest:
        plans.append(("planner, fewest", even, {**PLANNER, "fill_budget": False}, None))
    for prefill in filter(None, args.splits.split(",")):
        split: Counts = {"prefill": int(prefill), "decode": BUDGET - int(prefill)}
        plans.append((split_name(split), split, None, None))
    if not args.no_alone:
        for k, phase in enumerate(PHASES):
            for split in serving[k]:
                plans.append((f"{split_name(split)} {phase.name} alone", split, None, k))
    runs: list[Run] = []
    for number, (name, split, planner, phase) in enumerate(plans):
        played = turns if phase is None else alone(turns, phase, phase_s)
        run = measure(name, split, planner, played, f"r{number}s{args.seed}", args.keep)
        run.alone = phase
        runs.append(run)
        end = phase_s if phase is not None else len(PHASES) * phase_s
        print(
            f"{run.name}: goodput {run.goodput(0, end):.2f} requests/s, errors {error_kinds(run)}, load "
            f"{run.loads[0]:.1f} → {run.loads[1]:.1f}",
            flush=True,
        )
        save_records(runs, args.keep / "runs.json", schedule)
    for path in args.reuse:
        measured = {run.name for run in runs}
        reused = [run for run in load_records(path, turns, schedule) if run.name not in measured]
        print(f"reused from {path}: {', '.join(run.name for run in reused) or 'nothing'}")
        runs += reused
    whole = [run for run in runs if run.alone is None]
    alones = [run for run in runs if run.alone is not None]
    print_runs(whole, phase_s)
    if alones:
        print_alone(alones, phase_s)
    statics = [run for run in whole if not run.planned]
    for planner_run in (run for run in whole if run.planned):
        print(f"\n{planner_run.name}:")
        print_changes(planner_run, phase_s)
        if statics:
            print_summary(planner_run, statics, alones, predicted, phase_s)
    first = next((run for run in whole if run.planned), None)
    if first is not None and statics:
        plot(first, statics, alones, phase_s, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
