"""The planner's capacity estimates against the sim's capacity model (docs/sim-capacity-model.md).

Decode: `--engines` sim engines (separate processes, the capacity model with a step of `--step-ms` + `--per-seq-ms`
per sequence, no context cost), engine k kept at its own concurrency (`--concurrency`, streams of `--tokens`
tokens sent straight to it, one after the other). Every second the planner's reader (motor.planner.readings)
reads each engine's /metrics; after `--seconds` the planner's figures (motor.planner.figures) give the fitted
step line and the batch and tokens/s one instance holds within the ITL objective, printed beside what the model's
formula gives. Prefill: one engine at `--prefill-tokens-per-s`, kept busy by clients sending prompts of about
`--prompt-words` words with max_tokens 1: the measured tokens/s per busy interval against the configured rate.

    .venv/bin/python benchmarks/planner_capacity.py [--seconds 20] [--concurrency 2,6,12] [--itl-ms 40]
"""

import argparse
import asyncio
import datetime
import itertools
import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.plotting import default_plot_path, figure, save, skipped_without_matplotlib
from motor.planner.capacity import DecodeSample
from motor.planner.figures import _decode_sample, window_figures
from motor.planner.readings import EngineReading, Reading, engine_reading
from tests.fixtures.sim import SimEngine, start_sim_engine


def engine_args(args: argparse.Namespace) -> list[str]:
    return [
        "--capacity-model",
        "--step-overhead-ms",
        str(args.step_ms),
        "--decode-ms-per-seq",
        str(args.per_seq_ms),
        "--decode-ms-per-1k-context",
        "0",
        "--prefill-tokens-per-s",
        str(args.prefill_tokens_per_s),
        "--max-num-seqs",
        "64",
    ]


async def keep_busy(engine: SimEngine, clients: int, body: dict[str, Any], stop: asyncio.Event) -> int:
    """`clients` clients sending `body` one request after the other; the requests answered."""
    answered = 0

    async def client(index: int, http: httpx.AsyncClient) -> None:
        nonlocal answered
        sent = 0
        while not stop.is_set():
            sent += 1
            prompt = f"c{index} r{sent} " + body["prompt"]
            async with http.stream("POST", "/v1/completions", json={**body, "prompt": prompt}) as answer:
                await answer.aread()
            answered += 1

    async with httpx.AsyncClient(base_url=engine.base_url, timeout=120) as http:
        await asyncio.gather(*(client(i, http) for i in range(clients)))
    return answered


async def read_for(engines: dict[str, tuple[str, SimEngine]], seconds: float) -> list[Reading]:
    readings = []
    began = time.monotonic()
    async with httpx.AsyncClient(timeout=5) as http:
        while time.monotonic() - began < seconds:
            at = time.monotonic()
            found: dict[str, EngineReading] = {}
            for name, (role, engine) in engines.items():
                reading = engine_reading(role, (await http.get(f"{engine.base_url}/metrics")).text)
                if reading is not None:
                    found[name] = reading
            readings.append(Reading(at=at, engines=found))
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - at)))
    return readings


async def measure(args: argparse.Namespace, log_dir: Path) -> None:
    concurrency = [int(c) for c in args.concurrency.split(",")]
    decode = {
        f"decode-{k}": (
            "decode",
            start_sim_engine(log_dir, engine_id=f"decode-{k}", extra_args=engine_args(args)),
        )
        for k in range(len(concurrency))
    }
    prefill = start_sim_engine(log_dir, engine_id="prefill-0", extra_args=engine_args(args))
    engines = {**decode, "prefill-0": ("prefill", prefill)}
    try:
        load = os.getloadavg()[0]
        stop = asyncio.Event()
        prompt = " ".join(f"w{i}" for i in range(args.prompt_words))
        decode_body = {"model": "sim-model", "prompt": "hello", "max_tokens": args.tokens, "ignore_eos": True}
        busy = [
            asyncio.create_task(keep_busy(engine, clients, {**decode_body, "stream": True}, stop))
            for (_, engine), clients in zip(decode.values(), concurrency, strict=True)
        ]
        busy.append(
            asyncio.create_task(
                keep_busy(prefill, 6, {"model": "sim-model", "prompt": prompt, "max_tokens": 1}, stop)
            )
        )
        readings = await read_for(engines, args.seconds)
        stop.set()
        await asyncio.gather(*busy)
    finally:
        for _, engine in engines.values():
            engine.stop()
    report(args, readings, load, os.getloadavg()[0])


def report(args: argparse.Namespace, readings: list[Reading], load_before: float, load_after: float) -> None:
    itl_s = args.itl_ms / 1000
    counts = {"prefill": 1, "decode": len(args.concurrency.split(","))}
    figures = window_figures(readings, itl_s, counts, counts)  # type: ignore[arg-type]
    model_batch = (args.itl_ms - args.step_ms) / args.per_seq_ms
    print(
        f"\nplanner capacity vs the sim's capacity model ({datetime.date.today()}, load average "
        f"{load_before:.1f} before, {load_after:.1f} after, {args.seconds:.0f} s of readings)"
    )
    print("| figure | measured | model |")
    print("|---|---|---|")
    for note in figures.notes:
        print(f"| note | {note} | |")
    print(
        f"| decode batch within ITL {args.itl_ms:.0f} ms | {figures.decode_batch or 0:.2f} | {model_batch:.2f} |"
    )
    print(
        f"| decode tokens/s per instance | {figures.decode_tokens_per_s or 0:.1f} | "
        f"{model_batch / itl_s:.1f} |"
    )
    print(
        f"| prefill tokens/s per instance | {figures.prefill_tokens_per_s or 0:.0f} | {args.prefill_tokens_per_s} |"
    )
    first, last = readings[0].engines["prefill-0"], readings[-1].engines["prefill-0"]
    overall = (last.prompt_computed - first.prompt_computed) / (readings[-1].at - readings[0].at)
    print(
        f"| prefill tokens/s over the whole run (kept busy) | {overall:.0f} | {args.prefill_tokens_per_s} |"
    )
    samples = [
        sample
        for before, after in itertools.pairwise(readings)
        for name, now in after.engines.items()
        if now.role == "decode" and name in before.engines
        if (sample := _decode_sample(before.engines[name], now, after.at - before.at)) is not None
    ]
    plot(args, samples, figures.decode_batch)


@skipped_without_matplotlib
def plot(args: argparse.Namespace, samples: list[DecodeSample], batch: float | None) -> None:
    fig, axes = figure()
    ax = axes[0][0]
    ax.scatter([s.batch for s in samples], [s.step_s * 1000 for s in samples], s=10, label="engine intervals")
    top = max([s.batch for s in samples] + [args.itl_ms / args.per_seq_ms])
    xs = [0, top]
    ax.plot(xs, [args.step_ms + args.per_seq_ms * x for x in xs], label="model: step = a + b·batch")
    ax.axhline(args.itl_ms, linestyle=":", label=f"ITL objective {args.itl_ms:.0f} ms")
    if batch:
        ax.axvline(batch, linestyle="--", label=f"planner's batch {batch:.1f}")
    ax.set_xlabel("sequences per step")
    ax.set_ylabel("step (= ITL), ms")
    ax.legend()
    save(fig, args.plot)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--concurrency", default="2,6,12", help="streams per decode engine, one engine each")
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--step-ms", type=float, default=5.0)
    parser.add_argument("--per-seq-ms", type=float, default=4.0)
    parser.add_argument("--itl-ms", type=float, default=40.0)
    parser.add_argument("--prefill-tokens-per-s", type=int, default=4000)
    parser.add_argument("--prompt-words", type=int, default=600)
    parser.add_argument("--plot", type=Path, default=default_plot_path("planner_capacity"))
    parser.add_argument("--log-dir", type=Path, default=Path("benchmarks/out/planner_capacity_logs"))
    args = parser.parse_args()
    asyncio.run(measure(args, args.log_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
