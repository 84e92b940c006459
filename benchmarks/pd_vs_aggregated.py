"""PD disaggregation vs aggregated serving on this machine's vLLM CPU engines, like for like.

Two deployments of the same model on the same two cores, never up at the same time:
- PD: a copy of examples/local (1 prefill and 1 decode engine, CPU binding as the example sets it,
  MultiConnector[MooncakeConnector (tcp), MooncakeStoreConnector], a real mooncake_master, the controller and
  the coordinator, dispatch profile concurrent); every request goes through the coordinator.
- aggregated: two one-engine jobs whose engine section is the example's with the kv_transfer_config removed (no
  KV connector at all, no pool; model, flags and environment otherwise identical), bound like the example's
  prefill and decode engines; requests go through their coordinators, alternately.
Per round the mode that goes first flips (`--rounds`); each mode is deployed, measured and stopped in turn.

1. Decode inter-token latency while long prompts arrive. `--streams` stream clients (48-token prompts, up to
   `--stream-tokens` tokens, one request after the other) run for `--phase-seconds`; in the loaded phase long
   prompts (`--long-tokens` tokens, 1 output token) are also sent OPEN LOOP at `--long-rate` per second, the
   same offered rate in both modes, whatever the engines manage. When the phase ends everything still running is
   cancelled and the engines drain. The table shows what each mode completed of the offered long prompts and how
   long they took. ITL is reported client side (gaps between a stream's output events as received) and engine
   side (the engines' own `vllm:inter_token_latency_seconds` histograms).
2. TTFT of a pool hit vs a miss (PD only): a fresh long prompt through the coordinator (a miss: the prefill
   engine computes it), then, once the pool master holds its blocks, the same prompt again (prefix caching is
   off, so its KV comes from the pool). Samples where the miss reported cached tokens or the repeat reported none
   are left out of the table and counted.

A PNG (ITL distributions per mode, TTFT hit vs miss) goes to `--plot`.

The model is random and built here. `--shape small` (default: 8 layers, hidden 1024, about 90 M parameters) makes
a decode step about 30 ms and a 1536-token prefill a few seconds on one core, so the figures measure serving;
`--shape tiny` is the example's 1.3 M-parameter model, whose 2-4 ms steps leave the client side measuring the
CPU scheduler of a 2-core machine more than the engines.

    .venv/bin/python benchmarks/pd_vs_aggregated.py [--shape small|tiny] [--rounds 2] [--phase-seconds 20]
        [--streams 4] [--stream-tokens 300] [--long-rate 0.2] [--long-tokens 1536] [--ttft-rounds 5]
        [--plot benchmarks/out/pd_vs_aggregated.png]

Needs the vllm extra (scripts/setup_dev.sh); its plot needs the bench extra (matplotlib). Everything listens
on 127.0.0.1; `motor stop` stops each deployment (also on Ctrl-C). About 6 GB of RAM (two engines at a time).
"""

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from plotting import default_plot_path, figure, save, skipped_without_matplotlib

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from motor.config import load_config
from motor.config.ports import instance_ports
from motor.pool.metrics import scrape_pool
from motor.runtime.net import free_port_block
from tests.fixtures.local_example import with_ports

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "local"
MODEL_DIR = ".motor/models/tiny"
PD_JOB = "motor-bench-pd"
AGGREGATED_JOBS = ("motor-bench-agg-0", "motor-bench-agg-1")  # bound like the prefill, the decode engine
PORTS_PER_JOB = 32
MOTOR = [sys.executable, "-m", "motor.cli.main"]
TIMEOUT = httpx.Timeout(connect=10, read=300, write=30, pool=300)
SHAPES: dict[str, dict[str, Any]] = {
    "tiny": {},
    "small": {
        "hidden_size": 1024,
        "num_hidden_layers": 8,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "intermediate_size": 2816,
        "initializer_range": 0.02,
    },
}
MODES = ("PD", "aggregated")


# ---- deployments -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Deployment:
    mode: str
    run_root: Path
    jobs: tuple[str, ...]
    api_urls: list[str]  # coordinators the client sends to, in turn
    engine_urls: list[str]
    pool_metrics_url: str | None


def pd_config(base: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """examples/local with free ports and its own job id."""
    user = with_ports(json.loads((EXAMPLE / "user_config.json").read_text()), base)
    env = json.loads((EXAMPLE / "env.json").read_text())
    user["motor_deploy_config"]["job_id"] = PD_JOB
    user["kv_cache_pool_config"].update(port=base + 10, metrics_port=base + 11)
    for section in ("motor_engine_prefill_config", "motor_engine_decode_config"):
        transfer = user[section]["engine_config"]["kv_transfer_config"]["kv_connector_extra_config"]
        transfer["connectors"][0]["kv_port"] = str(base + 24)
    return user, env


def aggregated_config(base: int, job_id: str, core_env_of: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """One union engine with the example's engine section minus its kv_transfer_config, no pool, pinned like
    the example's `core_env_of` ("prefill" or "decode") engine."""
    example = json.loads((EXAMPLE / "user_config.json").read_text())
    example_env = json.loads((EXAMPLE / "env.json").read_text())
    sections = [example[f"motor_engine_{role}_config"] for role in ("prefill", "decode")]
    without = [{k: v for k, v in s["engine_config"].items() if k != "kv_transfer_config"} for s in sections]
    if without[0] != without[1] or sections[0]["engine_type"] != sections[1]["engine_type"]:
        raise SystemExit("examples/local's prefill and decode engines differ beyond their KV connector")
    user = with_ports(example, base)
    for key in ("motor_engine_prefill_config", "motor_engine_decode_config", "kv_cache_pool_config"):
        user.pop(key)
    deploy = user["motor_deploy_config"]
    deploy.pop("p_instances_num")
    deploy.pop("d_instances_num")
    deploy.update(job_id=job_id, hybrid_instances_num=1)
    user["motor_engine_union_config"] = {
        "engine_type": sections[0]["engine_type"],
        "engine_config": without[0],
    }
    env = {
        key: value
        for key, value in example_env.items()
        if key not in ("motor_engine_prefill_env", "motor_engine_decode_env")
    }
    env["motor_engine_union_env"] = example_env[f"motor_engine_{core_env_of}_env"]
    return user, env


def write_config(directory: Path, user: dict[str, Any], env: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for engine_section in (
        "motor_engine_prefill_config",
        "motor_engine_decode_config",
        "motor_engine_union_config",
    ):
        if engine_section in user:
            user[engine_section]["engine_config"]["enable_prompt_tokens_details"] = True
    (directory / "user_config.json").write_text(json.dumps(user, indent=2))
    (directory / "env.json").write_text(json.dumps(env, indent=2))
    return directory


def build_model(workdir: Path, shape: str) -> None:
    from motor.engine.tiny_model import TinyModelShape, build_tiny_model

    started = time.monotonic()
    build_tiny_model(workdir / MODEL_DIR, seed=0, shape=TinyModelShape(**SHAPES[shape]))
    print(f"model ({shape}) built in {time.monotonic() - started:.1f} s", flush=True)


def deploy(workdir: Path, mode: str) -> Deployment:
    """Deploy `mode`'s jobs (at once) and wait until they serve."""
    base = free_port_block(PORTS_PER_JOB * 2)
    if mode == "PD":
        configs = {PD_JOB: pd_config(base)}
    else:
        configs = {
            job: aggregated_config(base + PORTS_PER_JOB * i, job, core_env_of)
            for i, (job, core_env_of) in enumerate(zip(AGGREGATED_JOBS, ("prefill", "decode"), strict=True))
        }
    run_root = workdir / f"run-{mode}"
    api_urls, engine_urls, pool_url = [], [], None
    deploys = []
    started = time.monotonic()
    for job, (user, env) in configs.items():
        config_dir = write_config(workdir / f"config-{job}", user, env)
        topology = load_config(config_dir / "user_config.json", config_dir / "env.json")
        api = topology.user.motor_coordinator_config.api_config
        api_urls.append(f"http://127.0.0.1:{api.coordinator_api_infer_port}")
        engine_urls += [f"http://127.0.0.1:{p.engine_port}" for p in instance_ports(topology.roles)]
        if topology.pool is not None:
            pool_url = f"http://127.0.0.1:{topology.pool.metrics_port}/metrics"
        log = (workdir / f"deploy-{job}.log").open("wb")
        command = [*MOTOR, "deploy", "--config-dir", str(config_dir), "--run-root", str(run_root)]
        deploys.append(
            (
                job,
                log,
                subprocess.Popen(
                    command, cwd=workdir, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
                ),
            )
        )
    failed = []
    for job, log, process in deploys:
        if process.wait(timeout=900) != 0:
            failed.append(job)
        log.close()
    deployment = Deployment(mode, run_root, tuple(configs), api_urls, engine_urls, pool_url)
    if failed:
        stop(deployment)
        tails = "\n".join((workdir / f"deploy-{job}.log").read_text()[-2000:] for job in failed)
        raise SystemExit(f"motor deploy failed for {failed}:\n{tails}")
    print(f"{mode}: {len(engine_urls)} engines deployed in {time.monotonic() - started:.0f} s", flush=True)
    return deployment


def stop(deployment: Deployment) -> None:
    for job in deployment.jobs:
        subprocess.run(
            [*MOTOR, "stop", "--job-id", job, "--run-root", str(deployment.run_root)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=180,
        )


# ---- load --------------------------------------------------------------------------------------------------


@dataclass
class Phase:
    mode: str
    loaded: bool
    gaps: list[float] = field(default_factory=list)  # seconds between a stream's output events
    stream_ttfts: list[float] = field(default_factory=list)
    stream_tokens: int = 0
    seconds: float = 0.0
    long_offered: int = 0
    long_latencies: list[float] = field(default_factory=list)  # completed long prompts, seconds
    long_unfinished: int = 0  # still running when the phase ended (cancelled)
    errors: list[str] = field(default_factory=list)
    engine_itl: dict[float, float] = field(default_factory=dict)  # bucket upper bound → count, all engines
    engine_itl_sum: float = 0.0


def output_tokens(chunk: dict[str, Any]) -> int:
    """Tokens in a stream chunk (with return_token_ids; a token's text may be empty: partial UTF-8)."""
    return sum(len(c.get("token_ids") or []) for c in chunk.get("choices", []))


def random_ids(rng: random.Random, count: int) -> list[int]:
    return [rng.randrange(3, 512) for _ in range(count)]


async def decode_stream(
    client: httpx.AsyncClient, url: str, prompt: list[int], tokens: int, phase: Phase
) -> None:
    body = {
        "model": "tiny",
        "prompt": prompt,
        "max_tokens": tokens,
        "temperature": 0,
        "ignore_eos": True,
        "return_token_ids": True,
        "stream": True,
    }
    sent = time.perf_counter()
    last = None
    async with client.stream("POST", f"{url}/v1/completions", json=body) as response:
        if response.status_code != 200:
            phase.errors.append(f"stream: HTTP {response.status_code} {(await response.aread())[:200]!r}")
            return
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                phase.errors.append(f"stream: {chunk['error']}")
                return
            tokens = output_tokens(chunk)
            if tokens:
                now = time.perf_counter()
                if last is None:
                    phase.stream_ttfts.append(now - sent)
                else:
                    phase.gaps.append(now - last)
                last = now
                phase.stream_tokens += tokens


async def stream_worker(
    client: httpx.AsyncClient, url: str, rng: random.Random, args: argparse.Namespace, phase: Phase
) -> None:
    while True:
        await decode_stream(client, url, random_ids(rng, 48), args.stream_tokens, phase)


async def long_prompt(client: httpx.AsyncClient, url: str, prompt: list[int], phase: Phase) -> None:
    started = time.perf_counter()
    body = {"model": "tiny", "prompt": prompt, "max_tokens": 1, "temperature": 0}
    response = await client.post(f"{url}/v1/completions", json=body)
    if response.status_code == 200:
        phase.long_latencies.append(time.perf_counter() - started)
    else:
        phase.errors.append(f"long prompt: HTTP {response.status_code} {response.text[:200]}")


async def open_loop_long_prompts(
    client: httpx.AsyncClient, urls: list[str], rng: random.Random, args: argparse.Namespace, phase: Phase,
    tasks: list[asyncio.Task[None]],
) -> None:  # fmt: skip
    """Long prompt i is sent at i / long_rate seconds, to the coordinators in turn, whatever came back."""
    started = time.perf_counter()
    index = 0
    while True:
        delay = started + index / args.long_rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        prompt = random_ids(rng, args.long_tokens)
        tasks.append(asyncio.create_task(long_prompt(client, urls[index % len(urls)], prompt, phase)))
        phase.long_offered += 1
        index += 1


async def run_phase(
    client: httpx.AsyncClient, deployment: Deployment, loaded: bool, args: argparse.Namespace,
    rng: random.Random,
) -> Phase:  # fmt: skip
    """`args.phase_seconds` of streams (and open-loop long prompts when loaded); whatever still runs then is
    cancelled (closing a connection aborts the request in the engines) and the engines drain."""
    phase = Phase(deployment.mode, loaded)
    itl_before, itl_sum_before = await engine_itl(client, deployment.engine_urls)
    urls = deployment.api_urls
    long_tasks: list[asyncio.Task[None]] = []
    tasks = []
    started = time.perf_counter()
    if loaded:
        tasks.append(
            asyncio.create_task(
                open_loop_long_prompts(client, urls, random.Random(rng.random()), args, phase, long_tasks)
            )
        )
    tasks += [
        asyncio.create_task(
            stream_worker(client, urls[i % len(urls)], random.Random(rng.random()), args, phase)
        )
        for i in range(args.streams)
    ]
    await asyncio.sleep(args.phase_seconds)
    phase.seconds = time.perf_counter() - started
    phase.long_unfinished = sum(not task.done() for task in long_tasks)
    for task in [*tasks, *long_tasks]:
        task.cancel()
    for outcome in await asyncio.gather(*tasks, *long_tasks, return_exceptions=True):
        if isinstance(outcome, Exception):
            phase.errors.append(f"{type(outcome).__name__}: {outcome}")
    await drain(client, deployment.engine_urls)
    itl_after, itl_sum_after = await engine_itl(client, deployment.engine_urls)
    phase.engine_itl = {le: itl_after[le] - itl_before.get(le, 0.0) for le in itl_after}
    phase.engine_itl_sum = itl_sum_after - itl_sum_before
    return phase


async def engine_itl(client: httpx.AsyncClient, engines: list[str]) -> tuple[dict[float, float], float]:
    """The engines' `vllm:inter_token_latency_seconds` histogram, summed: cumulative bucket counts and sum."""
    buckets: dict[float, float] = {}
    total = 0.0
    for url in engines:
        for line in (await client.get(f"{url}/metrics")).text.splitlines():
            series, _, value = line.rpartition(" ")
            if series.startswith("vllm:inter_token_latency_seconds_bucket{"):
                le = float(series.split('le="', 1)[1].split('"', 1)[0])
                buckets[le] = buckets.get(le, 0.0) + float(value)
            elif series.startswith("vllm:inter_token_latency_seconds_sum{"):
                total += float(value)
    return buckets, total


def bucket_percentile(buckets: dict[float, float], q: float) -> float:
    """Upper bound of the histogram bucket holding the q-th percentile (cumulative counts)."""
    count = max(buckets.values(), default=0.0)
    for le in sorted(buckets):
        if buckets[le] >= q / 100 * count:
            return le
    return float("inf")


async def drain(client: httpx.AsyncClient, engines: list[str], timeout_s: float = 180.0) -> None:
    """Wait until no engine runs or queues a request (aborted requests end at the engine's next step)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        busy = 0.0
        for url in engines:
            text = (await client.get(f"{url}/metrics")).text
            busy += sum(
                float(line.rpartition(" ")[2])
                for line in text.splitlines()
                if line.startswith(("vllm:num_requests_running{", "vllm:num_requests_waiting{"))
            )
        if busy == 0:
            return
        await asyncio.sleep(0.2)
    raise RuntimeError(f"the engines still run requests {timeout_s:.0f} s after the phase ended")


async def ttft(client: httpx.AsyncClient, url: str, prompt: list[int]) -> tuple[float, int]:
    """Seconds to the first output event through the coordinator, and the usage's cached_tokens."""
    body = {
        "model": "tiny",
        "prompt": prompt,
        "max_tokens": 2,
        "temperature": 0,
        "return_token_ids": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    started = time.perf_counter()
    first = None
    cached = -1
    async with client.stream("POST", f"{url}/v1/completions", json=body) as response:
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code}: {(await response.aread())[:300]!r}")
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RuntimeError(f"SSE error: {chunk['error']}")
            if first is None and output_tokens(chunk):
                first = time.perf_counter() - started
            if chunk.get("usage"):
                cached = (chunk["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    if first is None:
        raise RuntimeError("the stream carried no output")
    return first, cached


@dataclass
class TtftSamples:
    misses: list[float] = field(default_factory=list)
    hits: list[float] = field(default_factory=list)
    cached: list[int] = field(default_factory=list)
    not_a_miss: int = 0  # the first request reported cached tokens: left out
    not_a_hit: int = 0  # the repeat reported no cached tokens (its KV did not come from the pool): left out


async def wait_pool_keys(url: str, at_least: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while scrape_pool(url).key_count < at_least and time.monotonic() < deadline:
        await asyncio.sleep(0.1)


async def measure_ttft(
    client: httpx.AsyncClient, deployment: Deployment, rng: random.Random, args: argparse.Namespace,
    samples: TtftSamples,
) -> None:  # fmt: skip
    assert deployment.pool_metrics_url is not None
    for _ in range(args.ttft_rounds):
        prompt = random_ids(rng, args.long_tokens)
        keys = scrape_pool(deployment.pool_metrics_url).key_count
        miss, miss_cached = await ttft(client, deployment.api_urls[0], prompt)
        # the prefill engine saves the prompt's blocks after it answered: the repeat is meant to find them
        await wait_pool_keys(deployment.pool_metrics_url, keys + (args.long_tokens - 1) // args.block_size)
        hit, hit_cached = await ttft(client, deployment.api_urls[0], prompt)
        print(
            f"  TTFT miss {miss * 1000:.0f} ms ({miss_cached} cached), repeat {hit * 1000:.0f} ms ({hit_cached} cached)",
            flush=True,
        )
        if miss_cached != 0:
            samples.not_a_miss += 1
        else:
            samples.misses.append(miss)
        if hit_cached <= 0:
            samples.not_a_hit += 1
        else:
            samples.hits.append(hit)
            samples.cached.append(hit_cached)


# ---- report ------------------------------------------------------------------------------------------------


def load_average() -> str:
    return " / ".join(f"{value:.1f}" for value in os.getloadavg())


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def merge(phases: list[Phase]) -> Phase:
    merged = Phase(phases[0].mode, phases[0].loaded)
    for phase in phases:
        merged.gaps += phase.gaps
        merged.stream_ttfts += phase.stream_ttfts
        merged.stream_tokens += phase.stream_tokens
        merged.seconds += phase.seconds
        merged.long_offered += phase.long_offered
        merged.long_latencies += phase.long_latencies
        merged.long_unfinished += phase.long_unfinished
        merged.errors += phase.errors
        for le, count in phase.engine_itl.items():
            merged.engine_itl[le] = merged.engine_itl.get(le, 0.0) + count
        merged.engine_itl_sum += phase.engine_itl_sum
    return merged


def yes(flag: bool) -> str:
    return "yes" if flag else "no"


def itl_table(phases: list[Phase], args: argparse.Namespace) -> dict[tuple[str, bool], Phase]:
    merged = {
        (mode, loaded): merge([p for p in phases if p.mode == mode and p.loaded == loaded])
        for mode in MODES
        for loaded in (False, True)
    }
    print(
        f"\nDecode ITL: {args.streams} streams (48-token prompts, up to {args.stream_tokens} tokens, repeated) for "
        f"{args.phase_seconds:g} s x {args.rounds} round(s) per row; long prompts: {args.long_tokens} tokens "
        f"(1 output token) offered open loop at {args.long_rate:g}/s in both modes"
    )
    print("client side: gaps between a stream's output events as the client receives them")
    print(
        "| mode | long prompts | ITL P50 ms | ITL P90 ms | ITL P99 ms | ITL max ms | stream TTFT P50 ms "
        "| stream tok/s | long offered | long completed (/s) | long latency P50 s | unfinished | errors |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (mode, loaded), phase in merged.items():
        completed = len(phase.long_latencies)
        long_text = (
            f"{phase.long_offered} | {completed} ({completed / phase.seconds:.2f}) | "
            f"{statistics.median(phase.long_latencies) if completed else float('nan'):.1f} | {phase.long_unfinished}"
            if loaded
            else "- | - | - | -"
        )
        if not phase.gaps:
            print(f"| {mode} | {yes(loaded)} | - | - | - | - | - | - | {long_text} | {len(phase.errors)} |")
            continue
        ms = [gap * 1000 for gap in phase.gaps]
        ttft_ms = statistics.median(phase.stream_ttfts) * 1000
        print(
            f"| {mode} | {yes(loaded)} | {percentile(ms, 50):.1f} | {percentile(ms, 90):.1f} | "
            f"{percentile(ms, 99):.1f} | {max(ms):.1f} | {ttft_ms:.0f} | {phase.stream_tokens / phase.seconds:.0f} | "
            f"{long_text} | {len(phase.errors)} |"
        )
    print(
        "engine side: all engines' vllm:inter_token_latency_seconds over the phases (P50/P99 = upper bound of "
        "the bucket that holds them)"
    )
    print("| mode | long prompts | tokens | ITL mean ms | ITL P50 ms (<=) | ITL P99 ms (<=) | ITLs > 50 ms |")
    print("|---|---|---|---|---|---|---|")
    for (mode, loaded), phase in merged.items():
        count = max(phase.engine_itl.values(), default=0.0)
        if not count:
            print(f"| {mode} | {yes(loaded)} | 0 | - | - | - | - |")
            continue
        over = 1 - phase.engine_itl.get(0.05, count) / count
        print(
            f"| {mode} | {yes(loaded)} | {count:.0f} | {phase.engine_itl_sum / count * 1000:.1f} | "
            f"{bucket_percentile(phase.engine_itl, 50) * 1000:g} | "
            f"{bucket_percentile(phase.engine_itl, 99) * 1000:g} | {over:.1%} |"
        )
    pd, agg = merged[("PD", True)], merged[("aggregated", True)]
    if pd.gaps and agg.gaps:
        p99_pd, p99_agg = percentile(pd.gaps, 99), percentile(agg.gaps, 99)
        print(f"under long prompts, client side: ITL P99 aggregated / PD = {p99_agg / p99_pd:.2f}x")
    if pd.engine_itl and agg.engine_itl:
        p99_pd, p99_agg = bucket_percentile(pd.engine_itl, 99), bucket_percentile(agg.engine_itl, 99)
        print(f"under long prompts, engine side: ITL P99 bucket aggregated / PD = {p99_agg / p99_pd:.2f}x")
    print(
        "under long prompts, completed long prompts: "
        + ", ".join(
            f"{mode} {len(merged[(mode, True)].long_latencies)} of {merged[(mode, True)].long_offered}"
            for mode in MODES
        )
    )
    for phase in merged.values():
        for error in phase.errors[:3]:
            print(f"  error ({phase.mode}): {error}")
    return merged


def ttft_table(samples: TtftSamples, args: argparse.Namespace) -> None:
    print(
        f"\nTTFT through the coordinator (PD), {args.long_tokens}-token prompts, {args.ttft_rounds} round(s)"
    )
    print(
        f"left out: {samples.not_a_miss} first request(s) that reported cached tokens, {samples.not_a_hit} "
        "repeat(s) that reported none (not a pool hit)"
    )
    print("| request | samples | TTFT median ms | TTFT min ms | TTFT max ms | cached tokens |")
    print("|---|---|---|---|---|---|")
    for name, values, cached in (
        ("miss (prefill computes)", samples.misses, "0"),
        (
            "pool hit (same prompt again)",
            samples.hits,
            f"{min(samples.cached, default=0)}-{max(samples.cached, default=0)}",
        ),
    ):
        if values:
            print(
                f"| {name} | {len(values)} | {statistics.median(values) * 1000:.0f} | {min(values) * 1000:.0f} | "
                f"{max(values) * 1000:.0f} | {cached} |"
            )
        else:
            print(f"| {name} | 0 | - | - | - | - |")
    if samples.misses and samples.hits:
        print(f"TTFT miss / hit = {statistics.median(samples.misses) / statistics.median(samples.hits):.2f}x")


@skipped_without_matplotlib
def plot(merged: dict[tuple[str, bool], Phase], samples: TtftSamples, path: Path) -> None:
    fig, axes = figure(1, 2)
    itl, ttft_axes = axes[0]
    for (mode, loaded), phase in merged.items():
        if phase.gaps:
            gaps = sorted(gap * 1000 for gap in phase.gaps)
            share = [(i + 1) / len(gaps) for i in range(len(gaps))]
            itl.plot(
                gaps,
                share,
                linestyle="-" if loaded else ":",
                label=f"{mode}, {'long prompts' if loaded else 'quiet'}",
            )
    itl.set_xscale("log")
    itl.set_xlabel("client-side inter-token gap (ms)")
    itl.set_ylabel("share of gaps ≤ x")
    itl.set_title("decode ITL, PD vs aggregated")
    itl.legend(fontsize="small")
    data = [[x * 1000 for x in samples.misses], [x * 1000 for x in samples.hits]]
    for position, values in enumerate(data, start=1):
        ttft_axes.scatter([position] * len(values), values, alpha=0.7)
    ttft_axes.set_xticks([1, 2], [f"miss (n={len(data[0])})", f"pool hit (n={len(data[1])})"])
    ttft_axes.set_ylabel("TTFT (ms)")
    ttft_axes.set_title(f"TTFT through the coordinator ({samples.not_a_hit} non-hits left out)")
    save(fig, path)


# ---- main --------------------------------------------------------------------------------------------------


async def measure_mode(
    deployment: Deployment, args: argparse.Namespace, rng: random.Random, round_index: int, phases: list[Phase],
    samples: TtftSamples,
) -> None:  # fmt: skip
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
    async with httpx.AsyncClient(timeout=TIMEOUT, limits=limits) as client:
        for url in deployment.api_urls:  # warm-up: a long prompt through each coordinator
            body = {"model": "tiny", "prompt": random_ids(rng, args.long_tokens), "max_tokens": 4}
            (await client.post(f"{url}/v1/completions", json=body)).raise_for_status()
        for loaded in (False, True):
            phase = await run_phase(client, deployment, loaded, args, rng)
            phases.append(phase)
            print(
                f"  round {round_index + 1} {deployment.mode:<10} {'loaded' if loaded else 'quiet ':<6} "
                f"{len(phase.gaps)} gaps, {len(phase.long_latencies)} of {phase.long_offered} long prompts, "
                f"{phase.seconds:.1f} s, load average {load_average()}",
                flush=True,
            )
        if deployment.mode == "PD" and round_index == 0:
            await measure_ttft(client, deployment, rng, args, samples)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shape", choices=sorted(SHAPES), default="small")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per mode (the first mode flips)")
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--stream-tokens", type=int, default=300, help="max_tokens of each stream request")
    parser.add_argument("--phase-seconds", type=float, default=20.0, help="length of each measured phase")
    parser.add_argument(
        "--long-rate", type=float, default=0.2, help="long prompts offered per second (open loop)"
    )
    parser.add_argument("--long-tokens", type=int, default=1536)
    parser.add_argument("--ttft-rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--plot", type=Path, default=default_plot_path("pd_vs_aggregated"), help="PNG to write"
    )
    args = parser.parse_args()
    args.block_size = json.loads((EXAMPLE / "user_config.json").read_text())["motor_engine_decode_config"][
        "engine_config"
    ]["block_size"]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    rng = random.Random(args.seed)
    phases: list[Phase] = []
    samples = TtftSamples()
    with tempfile.TemporaryDirectory(prefix="motor-bench-pd-") as tmp:
        workdir = Path(tmp)
        print(f"load average {load_average()} at the start", flush=True)
        build_model(workdir, args.shape)
        for round_index in range(args.rounds):
            for mode in MODES if round_index % 2 == 0 else MODES[::-1]:
                deployment = deploy(workdir, mode)
                try:
                    asyncio.run(measure_mode(deployment, args, rng, round_index, phases, samples))
                finally:
                    stop(deployment)
    merged = itl_table(phases, args)
    ttft_table(samples, args)
    print(
        f"host: {os.cpu_count()} cores, load average {load_average()} at the end (other jobs share the cores)"
    )
    plot(merged, samples, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
