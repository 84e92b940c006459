"""PD disaggregation vs aggregated serving on this machine's vLLM CPU engines, side by side in one run.

Deploys a copy of examples/local with `motor deploy` (1 prefill engine on core 0, 1 decode engine on core 1,
MultiConnector[MooncakeConnector (tcp), MooncakeStoreConnector], a real mooncake_master, the controller and
the coordinator; only the ports, the job id and `enable_prompt_tokens_details` differ), then measures:

1. Decode inter-token latency while long prompts arrive. `--streams` stream clients (48-token prompts, up to
   `--stream-tokens` tokens, one request after the other) run for `--phase-seconds` while `--senders` closed-loop
   clients keep sending long prompts (`--long-tokens` tokens, 1 output token); then everything still running is
   cancelled and the engines drain. ITL is reported twice: client side (gaps between a stream's output events
   as received) and engine side (the engines' own `vllm:inter_token_latency_seconds` histograms).
   - PD: every request through the coordinator (profile concurrent: the prefill engine computes the prompts,
     the decode engine receives their KV and decodes).
   - aggregated: the same two engines with the same config serve whole requests: requests go straight to them,
     alternately, without kv_transfer_params, so each engine mixes prefills into its decode batches.
   Each mode also runs quiet (no long prompts) as the baseline. The modes alternate round by round.
2. TTFT of a pool hit vs a miss: a fresh long prompt through the coordinator (a miss: the prefill engine
   computes it), then the same prompt again; prefix caching is off in the engines, so the second one's KV comes
   from the Mooncake pool (its `cached_tokens` is reported).

The model is random and built here. `--shape small` (default: 8 layers, hidden 1024, about 90 M parameters) makes
a decode step about 30 ms and a 1536-token prefill a few seconds on one core, so the figures measure serving;
`--shape tiny` is the example's 1.3 M-parameter model, whose 2-4 ms steps leave the client side measuring the
CPU scheduler of a 2-core machine more than the engines.

    .venv/bin/python benchmarks/pd_vs_aggregated.py [--shape small|tiny] [--rounds 2] [--phase-seconds 20]
        [--streams 4] [--stream-tokens 300] [--senders 2] [--long-tokens 1536] [--ttft-rounds 5]

Needs the vllm extra (scripts/setup_dev.sh). Everything listens on 127.0.0.1; `motor stop` stops the deployment
at the end (also on Ctrl-C). About 6 GB of RAM.
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

from motor.config import load_config
from motor.config.ports import instance_ports
from motor.pool.net import free_port_block

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "local"
MODEL_DIR = ".motor/models/tiny"
JOB_ID = "motor-bench-pd"
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


# ---- deployment ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Deployment:
    workdir: Path
    run_root: Path
    api_url: str
    prefill_url: str
    decode_url: str


def write_config(directory: Path) -> Path:
    user = json.loads((EXAMPLE / "user_config.json").read_text())
    env = json.loads((EXAMPLE / "env.json").read_text())
    base = free_port_block(32)
    user["motor_deploy_config"]["job_id"] = JOB_ID
    user["motor_coordinator_config"]["api_config"] = {
        "coordinator_api_host": "127.0.0.1",
        "coordinator_api_infer_port": base,
        "coordinator_api_mgmt_port": base + 1,
    }
    user["motor_controller_config"]["api_config"] = {
        "controller_api_host": "127.0.0.1",
        "controller_api_port": base + 2,
    }
    user["motor_nodemanger_config"]["api_config"] = {"node_manager_port": base + 4}
    user["motor_nodemanger_config"]["endpoint_config"] = {"base_port": base + 12}
    user["kv_cache_pool_config"].update(port=base + 10, metrics_port=base + 11)
    for section in ("motor_engine_prefill_config", "motor_engine_decode_config"):
        engine_config = user[section]["engine_config"]
        engine_config["enable_prompt_tokens_details"] = True
        transfer = engine_config["kv_transfer_config"]["kv_connector_extra_config"]["connectors"][0]
        transfer["kv_port"] = str(base + 24)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "user_config.json").write_text(json.dumps(user, indent=2))
    (directory / "env.json").write_text(json.dumps(env, indent=2))
    return directory


def build_model(workdir: Path, shape: str) -> None:
    from motor.engine.tiny_model import TinyModelShape, build_tiny_model

    started = time.monotonic()
    build_tiny_model(workdir / MODEL_DIR, seed=0, shape=TinyModelShape(**SHAPES[shape]))
    print(f"model ({shape}) built in {time.monotonic() - started:.1f} s", flush=True)


def deploy(workdir: Path) -> Deployment:
    config_dir = write_config(workdir / "config")
    topology = load_config(config_dir / "user_config.json", config_dir / "env.json")
    engines = {p.name: f"http://127.0.0.1:{p.engine_port}" for p in instance_ports(topology.roles)}
    api = topology.user.motor_coordinator_config.api_config
    run_root = workdir / "run"
    started = time.monotonic()
    log_path = workdir / "deploy.log"
    with log_path.open("wb") as log:
        deployed = subprocess.run(
            [*MOTOR, "deploy", "--config-dir", str(config_dir), "--run-root", str(run_root)],
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=900,
        )
    if deployed.returncode != 0:
        stop(run_root)
        raise SystemExit(f"motor deploy failed ({deployed.returncode}):\n{log_path.read_text()[-3000:]}")
    print(f"deployed 1 prefill + 1 decode engine in {time.monotonic() - started:.0f} s", flush=True)
    return Deployment(
        workdir,
        run_root,
        f"http://127.0.0.1:{api.coordinator_api_infer_port}",
        engines["prefill-0"],
        engines["decode-0"],
    )


def stop(run_root: Path) -> None:
    subprocess.run(
        [*MOTOR, "stop", "--job-id", JOB_ID, "--run-root", str(run_root)],
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
    long_prompts: int = 0
    errors: list[str] = field(default_factory=list)
    engine_itl: dict[float, float] = field(default_factory=dict)  # bucket upper bound → count, both engines
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


async def long_sender(
    client: httpx.AsyncClient, urls: list[str], rng: random.Random, args: argparse.Namespace, phase: Phase,
    turn: int,
) -> None:  # fmt: skip
    while True:
        url = urls[turn % len(urls)]
        turn += 1
        body = {
            "model": "tiny",
            "prompt": random_ids(rng, args.long_tokens),
            "max_tokens": 1,
            "temperature": 0,
        }
        response = await client.post(f"{url}/v1/completions", json=body)
        if response.status_code == 200:
            phase.long_prompts += 1
        else:
            phase.errors.append(f"long prompt: HTTP {response.status_code} {response.text[:200]}")


async def run_phase(
    client: httpx.AsyncClient, deployment: Deployment, mode: str, loaded: bool, args: argparse.Namespace,
    rng: random.Random,
) -> Phase:  # fmt: skip
    """`args.phase_seconds` of streams (and long prompts when loaded); whatever still runs then is cancelled
    (closing a connection aborts the request in the engines) and the engines drain before the next phase."""
    phase = Phase(mode, loaded)
    engines = [deployment.prefill_url, deployment.decode_url]
    itl_before, itl_sum_before = await engine_itl(client, engines)
    # PD: everything through the coordinator; aggregated: the two engines in turn, without kv_transfer_params
    urls = [deployment.api_url] if mode == "PD" else [deployment.prefill_url, deployment.decode_url]
    tasks = []
    if loaded:
        tasks += [
            asyncio.create_task(long_sender(client, urls, random.Random(rng.random()), args, phase, i))
            for i in range(args.senders)
        ]
        await asyncio.sleep(0.5)  # the long prompts are already arriving when the streams start
    started = time.perf_counter()
    tasks += [
        asyncio.create_task(
            stream_worker(client, urls[i % len(urls)], random.Random(rng.random()), args, phase)
        )
        for i in range(args.streams)
    ]
    await asyncio.sleep(args.phase_seconds)
    phase.seconds = time.perf_counter() - started
    for task in tasks:
        task.cancel()
    for outcome in await asyncio.gather(*tasks, return_exceptions=True):
        if isinstance(outcome, Exception):
            phase.errors.append(f"{type(outcome).__name__}: {outcome}")
    await drain(client, engines)
    itl_after, itl_sum_after = await engine_itl(client, engines)
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


async def drain(client: httpx.AsyncClient, engines: list[str], timeout_s: float = 120.0) -> None:
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
        merged.long_prompts += phase.long_prompts
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
        for mode in ("PD", "aggregated")
        for loaded in (False, True)
    }
    print(
        f"\nDecode ITL: {args.streams} streams (48-token prompts, up to {args.stream_tokens} tokens, repeated) for "
        f"{args.phase_seconds:g} s x {args.rounds} round(s) per row; long prompts: {args.senders} closed-loop "
        f"senders of {args.long_tokens}-token prompts (1 output token)"
    )
    print("client side: gaps between a stream's output events as the client receives them")
    print(
        "| mode | long prompts | ITL P50 ms | ITL P90 ms | ITL P99 ms | ITL max ms | stream TTFT P50 ms "
        "| stream tok/s | long prompts/s | errors |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (mode, loaded), phase in merged.items():
        if not phase.gaps:
            print(f"| {mode} | {yes(loaded)} | - | - | - | - | - | - | - | {len(phase.errors)} |")
            continue
        ms = [gap * 1000 for gap in phase.gaps]
        ttft_ms = statistics.median(phase.stream_ttfts) * 1000
        print(
            f"| {mode} | {yes(loaded)} | {percentile(ms, 50):.1f} | {percentile(ms, 90):.1f} | "
            f"{percentile(ms, 99):.1f} | {max(ms):.1f} | {ttft_ms:.0f} | {phase.stream_tokens / phase.seconds:.0f} | "
            f"{phase.long_prompts / phase.seconds:.2f} | {len(phase.errors)} |"
        )
    print(
        "engine side: both engines' vllm:inter_token_latency_seconds over the phases (P50/P99 = upper bound of "
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
        print(
            f"under long prompts, client side: ITL P99 aggregated / PD = {p99_agg / p99_pd:.2f}x (target >= 2x)"
        )
    if pd.engine_itl and agg.engine_itl:
        p99_pd, p99_agg = bucket_percentile(pd.engine_itl, 99), bucket_percentile(agg.engine_itl, 99)
        print(f"under long prompts, engine side: ITL P99 bucket aggregated / PD = {p99_agg / p99_pd:.2f}x")
    for phase in merged.values():
        for error in phase.errors[:3]:
            print(f"  error ({phase.mode}): {error}")
    return merged


def ttft_table(misses: list[float], hits: list[float], cached: list[int], args: argparse.Namespace) -> None:
    print(f"\nTTFT through the coordinator, {args.long_tokens}-token prompts, {len(misses)} round(s)")
    print("| request | TTFT median ms | TTFT min ms | TTFT max ms | cached tokens |")
    print("|---|---|---|---|---|")
    print(
        f"| miss (prefill computes) | {statistics.median(misses) * 1000:.0f} | {min(misses) * 1000:.0f} | "
        f"{max(misses) * 1000:.0f} | 0 |"
    )
    print(
        f"| pool hit (same prompt again) | {statistics.median(hits) * 1000:.0f} | {min(hits) * 1000:.0f} | "
        f"{max(hits) * 1000:.0f} | {min(cached)}-{max(cached)} |"
    )
    print(f"TTFT miss / hit = {statistics.median(misses) / statistics.median(hits):.2f}x (target >= 3x)")


# ---- main --------------------------------------------------------------------------------------------------


async def measure(deployment: Deployment, args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(timeout=TIMEOUT, limits=limits) as client:
        # warm-up: both paths, a long prompt each
        for url in (deployment.api_url, deployment.prefill_url, deployment.decode_url):
            body = {"model": "tiny", "prompt": random_ids(rng, args.long_tokens), "max_tokens": 4}
            (await client.post(f"{url}/v1/completions", json=body)).raise_for_status()
        phases: list[Phase] = []
        for round_index in range(args.rounds):
            modes = ("PD", "aggregated") if round_index % 2 == 0 else ("aggregated", "PD")
            for mode in modes:
                for loaded in (False, True):
                    phase = await run_phase(client, deployment, mode, loaded, args, rng)
                    phases.append(phase)
                    print(
                        f"  round {round_index + 1} {mode:<10} {'loaded' if loaded else 'quiet ':<6} "
                        f"{len(phase.gaps)} gaps, {phase.long_prompts} long prompts, {phase.seconds:.1f} s",
                        flush=True,
                    )
        itl_table(phases, args)
        misses, hits, cached = [], [], []
        for _ in range(args.ttft_rounds):
            prompt = random_ids(rng, args.long_tokens)
            miss, miss_cached = await ttft(client, deployment.api_url, prompt)
            await asyncio.sleep(0.2)  # the prefill engine stores the prompt's blocks asynchronously
            hit, hit_cached = await ttft(client, deployment.api_url, prompt)
            if miss_cached != 0 or hit_cached <= 0:
                print(f"  warning: cached tokens miss={miss_cached} hit={hit_cached}")
            misses.append(miss)
            hits.append(hit)
            cached.append(hit_cached)
            print(
                f"  TTFT miss {miss * 1000:.0f} ms, hit {hit * 1000:.0f} ms ({hit_cached} cached)", flush=True
            )
    ttft_table(misses, hits, cached, args)
    print(
        f"host: {os.cpu_count()} cores, load average {load_average()} at the end (other jobs share the cores)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shape", choices=sorted(SHAPES), default="small")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per mode (modes alternate)")
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--stream-tokens", type=int, default=300, help="max_tokens of each stream request")
    parser.add_argument("--phase-seconds", type=float, default=20.0, help="length of each measured phase")
    parser.add_argument("--senders", type=int, default=2, help="closed-loop senders of long prompts")
    parser.add_argument("--long-tokens", type=int, default=1536)
    parser.add_argument("--ttft-rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory(prefix="motor-bench-pd-") as tmp:
        workdir = Path(tmp)
        print(f"load average {load_average()} at the start", flush=True)
        build_model(workdir, args.shape)
        deployment = deploy(workdir)
        try:
            asyncio.run(measure(deployment, args))
        finally:
            stop(deployment.run_root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
