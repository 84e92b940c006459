"""Which instance each leg goes to, at cluster scale: motor's scheduling policies against vllm-router's, on the
same prefill/decode cluster of simulated engines, under the same load.

The cluster: a real `mooncake_master` (the shared KV pool) and two motor-sim processes with the capacity model
(docs/sim-capacity-model.md), one serving N prefill engines (kv_producer: they write their KV to the pool), one
N decode engines (kv_consumer), as virtual engines. The prefill engines publish vLLM's KV events (ZMQ on ipc://
sockets in the run's directory, `--prefix-caching-hash-algo sha256`, PYTHONHASHSEED 0) when a motor path uses
kv_cache_affinity, and motor registers their addresses with the instances.

Two scenarios (`--scenario`):
- shared-pool (the default): every prefill engine reads the pool, so a prefix any of them computed is a pool hit
  for all: what is left to compute, not who saw the prefix, is what a prefill costs. The decode steps of an
  NP+ND cluster's engines cost N/4 as much per sequence as those of the reference 4P+4D cluster
  (`cluster_capacity`), so 8P+8D and 16P+16D have about the same decode capacity and saturate at the few
  requests per second a 2-core machine can send through a router. Workload: multi-turn sessions over a few
  shared system prompts (Zipf-popular).
- cache-pressure: many tenants (uniformly popular) with long prefixes that together need `KV_PRESSURE` (70 %) of
  the prefill engines' KV blocks, so where a tenant's prefix lives is what a prefill costs. The prefill engines
  never read the pool (the sim's `--fault-kv-get-fail`: their reads fail, their writes go on), so every prefix
  hit is one of their own cache; the pool only hands the KV from prefill to decode. Decode steps cost as much as
  the reference engine's, so the decode side is not the bottleneck before the prefill side is. Before each row
  every tenant's prefix is sent once through the path (not measured), so the row starts on a warm cluster whose
  placement the path chose, as a long-running service would.
The parameters are printed with the results.

The paths, each started fresh against the same engines and alternated turn by turn at every rate:
- motor: a controller-less coordinator (prefill_first, the instances registered through its management API),
  once per `scheduler_type` (`--motor-policies`) and coordinator worker count (`--workers`; path
  `motor POLICY/wN`), pd_aware with admission bounds derived from the engines;
- vllm-router 0.1.17 in vLLM PD mode (`--vllm-pd-disaggregation`), once per policy (`--router-policies`), its
  metrics listener on its own free port; `POLICY@N` adds its global admission (`--max-concurrent-requests N`,
  a 2 s queue), by default cache_aware with N = pd_aware's decode bound × the decode engines;
- Dynamo 1.6.1 (`--dynamo kv`, installed by scripts/install_dynamo.sh): its frontend with `--router-mode MODE`
  over engines of its own, as many disaggregated mocker prefill and decode workers as the sims (one process
  per role), calibrated to the sim engines per word of prompt (KV blocks, token budget, prefill and decode
  step costs, the prefill→decode link: benchmarks/dynamo_peer.py), started fresh for each row; its local hit
  ratio is its router's (the prefix it found cached on the chosen prefill worker, from the workers' KV
  events), it has no pool and no handover figure. With a Dynamo path the whole run moves into a loopback-only
  network namespace.

The workload (`make_workload`, seeded, identical for every path): multi-turn sessions, each over one system
prompt or tenant prefix, each turn's prompt the previous one plus the answer plus a new user message, lognormal
(long-tailed) prompt and answer lengths, session starts in bursts (gamma inter-arrivals, CV 1.5) and turns after
a think time, all on an open-loop schedule: turn k is sent at its time whatever happened to turn k-1. Every run
salts its prompts' first word, so no run finds another run's prefixes in the engines' caches or the pool.

Per path and rate: goodput (requests/s that met TTFT ≤ `--ttft-slo` and their own ITL P99 ≤ `--itl-slo`, over
every request sent), TTFT P50/P90/P99 and ITL P50/P99 (over the completed requests / their token gaps), output
tokens/s (of the completed requests, from the first send to the last answer), errors and the refused fraction
(requests answered with an HTTP error), the prefill engines' pool hit ratio and local prefix cache hit ratio
(prompt tokens found in the pool / their own cache, from the sims' metrics), the decode engines' handover ratio
(prompt tokens whose KV the prefill handed over: a PD path that works), and the router's CPU time per request
(its process tree's user + system time over the run); and whether the machine kept up: the load generator's
and the sims' share of a core, the client's send lag P99 and the load average. A row whose client sent more
than `--max-send-lag` late ran on a starved machine and is measured again (the least starved attempt is kept).
A PNG of goodput, output tokens/s and TTFT P90 and P99 against the requests sent per second goes to `--plot`
(benchmarks/out/ by default).

    .venv/bin/python benchmarks/cluster_scheduling.py [--quick] [--scenario shared-pool|cache-pressure]
        [--engines 8|16] [--rates 5,8,12] [--duration 30] [--workers 1,4]
        [--motor-policies round_robin,load_balance,prefix_affinity,pd_aware,kv_cache_affinity]
        [--router-policies round_robin,cache_aware,power_of_two,cache_aware@40] [--dynamo kv] [--seed 1]

Everything listens on 127.0.0.1 (or on ipc:// sockets in the run's directory) on free ports; every process
started here is stopped by pid at the end.
"""

import argparse
import asyncio
import functools
import itertools
import json
import math
import os
import random
import re
import signal
import string
import sys
import tempfile
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp
import uvloop
from coordinator_overhead import (
    REFRESH_TOKEN,
    Process,
    free_port,
    process_seconds,
    refresh,
    spawn,
    wait_http,
)
from dynamo_peer import (
    NVEXT_TOKEN_EVENTS,
    DynamoDeployment,
    enter_loopback_namespace,
    mocker_flags,
    perf_tables,
    role_flags,
    start_deployment,
    tiny_model_dir,
    tokens_per_word,
    write_perf_data,
)
from plotting import default_plot_path, figure, save, skipped_without_matplotlib
from prometheus_client.parser import text_string_to_metric_families

from motor.config import load_documents
from motor.config.kv_events import DEFAULT_HASH_ALGORITHM, KV_EVENTS_TOPIC
from motor.deploy.plan import build_plan
from motor.deploy.plan.coordinator import POOL_CLIENT_CONFIG
from motor.engine.sim.capacity import CapacityModel
from motor.engine.sim.cli import capacity_flags
from motor.engine.sim.config import KvEventsConfig
from motor.kv.pool import KvCachePoolConfig
from motor.pool.master import MooncakeMaster
from motor.protocol.specs import CoordinatorSpec, PoolTierSpec
from motor.runtime.net import free_local_ports

MODEL = "cluster-sim"
HASH_SEED = "0"  # PYTHONHASHSEED of the prefill sims and the coordinator's kv_index: their block hashes agree
KV_EVENTS_POLICY = "kv_cache_affinity"  # routes on the engines' KV events
MOTOR_POLICIES = ("round_robin", "load_balance", "prefix_affinity", "pd_aware", KV_EVENTS_POLICY)
ROUTER_POLICIES = ("round_robin", "cache_aware", "power_of_two")
# The engine of the reference cluster, 4P+4D: slow, so that the few requests per second a 2-core machine can
# drive through a router fill the cluster. Prefill at 1,000 tokens/s; a decode step costs 5 ms + 6 ms per
# running sequence + 2 ms per 1,000 tokens of their context (a dozen sequences of 1,000 tokens: ~100 ms a token,
# the ITL objective); 1,024 blocks of 16 tokens of KV (about 16 such sequences) per engine.
REFERENCE_ENGINES = 4
REFERENCE_CAPACITY = CapacityModel(
    enabled=True,
    prefill_tokens_per_s=1000,
    max_num_batched_tokens=2048,
    step_overhead_ms=5,
    decode_ms_per_seq=6.0,
    decode_ms_per_1k_context=2.0,
)
ENGINE_BLOCKS = 1024
ENGINE_MAX_MODEL_LEN = 16384
ENGINE_MAX_SEQS = 64
# pd_aware's admission bounds follow from the engine: a prefill queue of 1.5 s of compute (under the 2 s TTFT
# objective); a decode batch whose step at 1,000 tokens of context each stays under 85 ms (under 100 ms); a leg
# waits up to 2 s for room (longer would miss the TTFT objective anyway), then the request is refused.
ADMISSION_PREFILL_QUEUE_S = 1.5
ADMISSION_DECODE_STEP_MS = 85.0
ADMISSION_QUEUE_TIMEOUT_S = 2.0


def cluster_capacity(engines: int) -> CapacityModel:
    """The engine of an `engines`P+`engines`D cluster: the reference engine with its per-sequence and
    per-context decode step costs multiplied by `engines` / 4 (the fixed step overhead stays), so every cluster
    size decodes about as many tokens per second within the ITL objective as the reference cluster and
    saturates near the same arrival rate, one this machine can send. The prefill rate stays: a slower prefill
    would put a lone long prompt past the TTFT objective whatever the router does (the cluster is decode-bound
    either way)."""
    slowdown = engines / REFERENCE_ENGINES
    return replace(
        REFERENCE_CAPACITY,
        decode_ms_per_seq=REFERENCE_CAPACITY.decode_ms_per_seq * slowdown,
        decode_ms_per_1k_context=REFERENCE_CAPACITY.decode_ms_per_1k_context * slowdown,
    )


def admission_bounds(model: CapacityModel) -> dict[str, float]:
    """pd_aware's `scheduler_config` admission keys for engines timed by `model`."""
    per_seq_ms = model.decode_ms_per_seq + model.decode_ms_per_1k_context
    decode_requests = int((ADMISSION_DECODE_STEP_MS - model.step_overhead_ms) / per_seq_ms)
    return {
        "admission_max_prefill_tokens": round(ADMISSION_PREFILL_QUEUE_S * model.prefill_tokens_per_s),
        "admission_max_decode_requests": max(1, decode_requests),
        "admission_queue_timeout": ADMISSION_QUEUE_TIMEOUT_S,
    }


KV_BYTES_PER_TOKEN = 16  # the real bytes the sims put in the pool (cheap); the link is timed by the model
_LISTENING = re.compile(
    r"motor-sim listening on http://127\.0\.0\.1:(\d+) \(virtual engine (\d+), engine_id (\S+)\)"
)


# ---- workload (pure) ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkloadShape:
    system_prompts: int = 8  # or tenants: each session continues one of them
    system_median_tokens: int = 600
    system_sigma: float = 0.45  # lognormal spread of the system prompts' lengths (0: all the median)
    max_system_tokens: int = 4000
    popularity_exponent: float = (
        1.0  # system prompt k is picked with weight 1 / (k + 1) ** exponent (0: uniform)
    )
    user_median_tokens: int = 80
    answer_median_tokens: int = 40
    sigma: float = 0.9  # lognormal spread of every length: a long tail
    max_prompt_tokens: int = 8000
    max_answer_tokens: int = 400
    mean_turns: float = 3.0
    max_turns: int = 8
    think_mean_s: float = 4.0
    burst_cv: float = 1.5  # coefficient of variation of the session inter-arrival times (1 = Poisson)


@dataclass(frozen=True)
class Turn:
    at_s: float  # when to send it, from the run's start
    session: int
    index: int
    prompt_words: tuple[str, ...]
    max_tokens: int

    def prompt(self, salt: str) -> str:
        return " ".join((salt, *self.prompt_words))


def _lognormal(rng: random.Random, median: float, sigma: float, cap: int) -> int:
    return max(1, min(cap, round(rng.lognormvariate(math.log(median), sigma))))


def _words(rng: random.Random, count: int) -> tuple[str, ...]:
    """`count` random three-letter words: one token each for the sim's tokenizer, and about one for the
    coordinator's estimate (4 characters a token, the space included)."""
    return tuple("".join(rng.choices(string.ascii_lowercase, k=3)) for _ in range(count))


def _workload_rng(rate: float, duration_s: float, seed: int) -> random.Random:
    return random.Random(f"{seed}:{rate}:{duration_s}")


def _system_prompts(rng: random.Random, shape: WorkloadShape) -> list[tuple[str, ...]]:
    return [
        _words(rng, _lognormal(rng, shape.system_median_tokens, shape.system_sigma, shape.max_system_tokens))
        for _ in range(shape.system_prompts)
    ]


def system_prompts(
    rate: float, duration_s: float, seed: int, shape: WorkloadShape = WorkloadShape()
) -> list[tuple[str, ...]]:
    """The system prompts (tenant prefixes) `make_workload` builds its sessions on, for the same arguments."""
    return _system_prompts(_workload_rng(rate, duration_s, seed), shape)


def make_workload(
    rate: float, duration_s: float, seed: int, shape: WorkloadShape = WorkloadShape()
) -> list[Turn]:
    """The turns that fall within [0, `duration_s`) of sessions arriving at `rate` / mean turns per second from
    time 0 (so the offered rate ramps up to about `rate` requests/s as sessions accumulate turns), sorted by
    time. Every turn's history was sent before it. Deterministic in (rate, duration, seed, shape)."""
    rng = _workload_rng(rate, duration_s, seed)
    systems = _system_prompts(rng, shape)
    popularity = [1 / (k + 1) ** shape.popularity_exponent for k in range(shape.system_prompts)]
    session_rate = rate / shape.mean_turns
    gamma_shape = 1 / shape.burst_cv**2
    turns: list[Turn] = []
    start = 0.0
    session = 0
    while True:
        start += rng.gammavariate(gamma_shape, 1 / (session_rate * gamma_shape))
        if start >= duration_s:
            break
        words: tuple[str, ...] = rng.choices(systems, popularity)[0]
        at = start
        for index in range(shape.max_turns):
            if index and rng.random() < 1 / shape.mean_turns:  # geometric: mean_turns turns on average
                break
            words = (*words, *_words(rng, _lognormal(rng, shape.user_median_tokens, shape.sigma, 2000)))
            if len(words) > shape.max_prompt_tokens or at >= duration_s:
                break
            answer = _lognormal(rng, shape.answer_median_tokens, shape.sigma, shape.max_answer_tokens)
            turns.append(Turn(at, session, index, words, answer))
            # the next prompt carries this answer (as text: which words does not matter to the caches)
            words = (*words, *_words(rng, answer))
            at += rng.expovariate(1 / shape.think_mean_s)
        session += 1
    turns.sort(key=lambda turn: turn.at_s)
    return turns


# ---- scenarios (pure) --------------------------------------------------------------------------------------


SCENARIOS = ("shared-pool", "cache-pressure")
BLOCK_SIZE = 16  # the sims' default, and the coordinator's kv_index
# cache-pressure: tenants whose prefixes of TENANT_PREFIX_TOKENS together need KV_PRESSURE of the prefill
# engines' KV, PRESSURE_PREFILL_BLOCKS each (8,192 tokens: the longest prompt fits, with its answer)
KV_PRESSURE = 0.7
TENANT_PREFIX_TOKENS = 2000
PRESSURE_PREFILL_BLOCKS = 512
PRESSURE_MAX_PROMPT_TOKENS = 6000


@dataclass(frozen=True)
class Scenario:
    name: str
    engines: int  # prefill engines, and as many decode engines
    model: CapacityModel
    shape: WorkloadShape
    prefill_blocks: int  # a prefill engine's KV budget, which is also its prefix cache
    # cache pressure: the prefill engines never read the pool (their prefix hits are their own cache's; the pool
    # still hands their KV to the decode engines), and every row starts with each tenant's prefix sent once
    cache_pressure: bool

    def engine_flags(self, role: str) -> list[str]:
        blocks = self.prefill_blocks if role == "prefill" else ENGINE_BLOCKS
        max_model_len = min(ENGINE_MAX_MODEL_LEN, blocks * BLOCK_SIZE)
        flags = ["--num-gpu-blocks-override", str(blocks), "--max-model-len", str(max_model_len)]
        flags += ["--max-num-seqs", str(ENGINE_MAX_SEQS)]
        if role == "prefill" and self.cache_pressure:
            flags.append("--fault-kv-get-fail")  # the sim's reads of the pool fail; its writes go on
        return flags

    @property
    def prefix_share(self) -> float:
        """The tenants' prefixes over the prefill engines' KV (every tenant's prefix is the median long)."""
        tokens = self.shape.system_prompts * self.shape.system_median_tokens
        return tokens / (self.engines * self.prefill_blocks * BLOCK_SIZE)

    def describe(self) -> str:
        model = self.model
        text = (
            f"{self.name}, {self.engines}P+{self.engines}D engines: prefill {model.prefill_tokens_per_s:g} "
            f"tokens/s, decode step {model.step_overhead_ms:g} ms + {model.decode_ms_per_seq:g} ms/sequence + "
            f"{model.decode_ms_per_1k_context:g} ms/1k context tokens; prefill {' '.join(self.engine_flags('prefill'))}; "
            f"decode {' '.join(self.engine_flags('decode'))}; pd_aware admission "
            + ", ".join(
                f"{key.removeprefix('admission_')} {value:g}"
                for key, value in admission_bounds(model).items()
            )
        )
        if self.cache_pressure:
            text += (
                f"; {self.shape.system_prompts} tenants × {self.shape.system_median_tokens} prefix tokens = "
                f"{self.prefix_share:.0%} of the prefill KV, no pool reads on prefill, warmed up"
            )
            if self.shape.popularity_exponent:
                top = 1 / sum(
                    1 / (k + 1) ** self.shape.popularity_exponent for k in range(self.shape.system_prompts)
                )
                text += (
                    f"; tenant k's weight 1/(k+1)^{self.shape.popularity_exponent:g} (the first: {top:.0%})"
                )
        return text


def motor_policy(spec: str) -> tuple[str, dict[str, Any]]:
    """A `--motor-policies` entry: `POLICY`, or `kv_cache_affinity@KEY=VALUE;KEY=VALUE` with
    `scheduler_config.kv_affinity` keys (numbers, or a word such as `mode=load_gated`); returns (scheduler_type,
    its kv_affinity keys). The coordinator's config validation names a wrong key or value."""
    policy, _, options = spec.partition("@")
    if options and policy != KV_EVENTS_POLICY:
        raise ValueError(f"{spec}: only {KV_EVENTS_POLICY} takes weights (POLICY@KEY=VALUE;...)")
    weights: dict[str, Any] = {}
    for option in filter(None, options.split(";")):
        key, equals, value = option.partition("=")
        if not equals or not key:
            raise ValueError(f"{spec}: {option!r} is not KEY=VALUE")
        try:
            weights[key] = json.loads(value)
        except json.JSONDecodeError:
            weights[key] = value
    return policy, weights


def make_scenario(name: str, engines: int, popularity_exponent: float = 0.0) -> Scenario:
    """`name` on `engines`P+`engines`D; cache-pressure's tenant k is picked with weight 1 / (k + 1) **
    `popularity_exponent` (0: uniformly popular)."""
    if name == "shared-pool":
        model = cluster_capacity(engines)
        return Scenario(name, engines, model, WorkloadShape(), ENGINE_BLOCKS, cache_pressure=False)
    prefill_tokens = engines * PRESSURE_PREFILL_BLOCKS * BLOCK_SIZE
    tenants = max(1, round(KV_PRESSURE * prefill_tokens / TENANT_PREFIX_TOKENS))
    shape = WorkloadShape(
        system_prompts=tenants,
        system_median_tokens=TENANT_PREFIX_TOKENS,
        system_sigma=0.0,
        max_system_tokens=TENANT_PREFIX_TOKENS,
        popularity_exponent=popularity_exponent,
        max_prompt_tokens=PRESSURE_MAX_PROMPT_TOKENS,
    )
    # decode at the reference engine's speed whatever the size: the prefill side is what this scenario loads
    return Scenario(name, engines, REFERENCE_CAPACITY, shape, PRESSURE_PREFILL_BLOCKS, cache_pressure=True)


# ---- results (pure) ----------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """One request as the client saw it."""

    ok: bool
    ttft_s: float = math.inf
    gaps_s: list[float] = field(default_factory=list)  # between consecutive tokens
    tokens: int = 0
    error: str = ""
    late_s: float = 0.0  # how long after its scheduled time the client sent it (a starved load generator)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def meets_slo(outcome: Outcome, ttft_slo_s: float, itl_slo_s: float) -> bool:
    return (
        outcome.ok
        and outcome.ttft_s <= ttft_slo_s
        and (not outcome.gaps_s or percentile(outcome.gaps_s, 0.99) <= itl_slo_s)
    )


def goodput(outcomes: list[Outcome], duration_s: float, ttft_slo_s: float, itl_slo_s: float) -> float:
    """Requests per second of the schedule's duration that completed within both objectives."""
    return sum(meets_slo(outcome, ttft_slo_s, itl_slo_s) for outcome in outcomes) / duration_s


# ---- processes ---------------------------------------------------------------------------------------------


@dataclass
class Engines:
    process: Process
    ports: list[int]
    engine_ids: list[str]
    kv_events: list[KvEventsConfig] = field(default_factory=list)  # per engine, when they publish

    def endpoint(self, index: int) -> dict[str, Any]:
        """Engine `index` as an instance's endpoint, with its KV event addresses when it publishes."""
        endpoint: dict[str, Any] = {"host": "127.0.0.1", "port": self.ports[index]}
        if self.kv_events:
            events = self.kv_events[index]
            endpoint |= {"kv_events": events.endpoint, "kv_events_replay": events.replay_endpoint}
        return endpoint


@dataclass
class Cluster:
    scenario: Scenario
    prefill: Engines
    decode: Engines
    store_config: Path  # the engines' store config (the pool's master)

    def pool_tier(self) -> PoolTierSpec | None:
        """What kv_cache_affinity asks the pool (the sims' block keys), where the prefill engines read it: the
        shared-pool scenario; under cache pressure they never do, and the pool is not asked."""
        if self.scenario.cache_pressure:
            return None
        store = json.loads(self.store_config.read_text())
        return PoolTierSpec(
            store_config={**store, **POOL_CLIENT_CONFIG},
            key_scheme="motor-sim",
            model=MODEL,
            kv_bytes_per_token=KV_BYTES_PER_TOKEN,
        )


def start_pool(work: Path) -> MooncakeMaster:
    rpc_port, metrics_port = free_local_ports(2)
    pool = KvCachePoolConfig(
        protocol="tcp",
        global_segment_size=256 << 20,
        local_buffer_size=64 << 20,
        port=rpc_port,
        metrics_port=metrics_port,
    )
    master = MooncakeMaster(pool, "127.0.0.1", work / "mooncake_master.log")
    master.start()
    return master


def kv_events_config(work: Path) -> KvEventsConfig:
    """vLLM's KV event publisher on ipc:// sockets in the run's directory (the sim binds those, as vLLM does;
    a tcp:// address other than `*` it would connect to); virtual engine i adds `_dp<i>` to both paths."""
    base = work / "kv-prefill"
    return KvEventsConfig(
        enable_kv_cache_events=True,
        publisher="zmq",
        endpoint=f"ipc://{base}.ev",
        replay_endpoint=f"ipc://{base}.rp",
        topic=KV_EVENTS_TOPIC,
    )


def start_engines(
    role: str, scenario: Scenario, store_config: Path, work: Path, kv_events: KvEventsConfig | None
) -> Engines:
    """`scenario.engines` virtual engines of `role` in one sim process; `kv_events`: they publish their
    prefix caches' changes (block hashes seeded by HASH_SEED, as the coordinator's kv_index says)."""
    kv_role = "kv_producer" if role == "prefill" else "kv_consumer"
    transfer = {"kv_connector": "MooncakeStoreConnector", "kv_role": kv_role, "engine_id": role}
    count = scenario.engines
    args = [
        sys.executable, "-m", "motor.engine.sim", "--host", "127.0.0.1", "--port", "0", "--model", MODEL,
        "--log-level", "warning", "--virtual-engines", str(count), "--kv-transfer-config", json.dumps(transfer),
        "--store-config", str(store_config), "--kv-bytes-per-token", str(KV_BYTES_PER_TOKEN),
        *scenario.engine_flags(role), *capacity_flags(scenario.model),
    ]  # fmt: skip
    if kv_events is not None:
        args += ["--kv-events-config", kv_events.model_dump_json(exclude_defaults=True)]
        args += ["--prefix-caching-hash-algo", DEFAULT_HASH_ALGORITHM]
    process = spawn(f"sim-{role}", args, 0, work, env={"PYTHONHASHSEED": HASH_SEED})
    try:
        engines = _listening_engines(process, role, count)
    except BaseException:  # a failed start, or the run was ended meanwhile
        process.stop()
        raise
    if kv_events is not None:
        engines.kv_events = [kv_events.for_engine(index) for index in range(count)]
    return engines


def _listening_engines(process: Process, role: str, count: int) -> Engines:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.popen.poll() is not None:
            raise RuntimeError(f"the {role} sim exited:\n{process.log.read_text()[-3000:]}")
        found = sorted(
            (int(k), int(port), engine_id)
            for port, k, engine_id in _LISTENING.findall(process.log.read_text())
        )
        if len(found) == count:
            for _, port, _ in found:
                wait_http(process, f"http://127.0.0.1:{port}/v1/models")
            return Engines(process, [port for _, port, _ in found], [engine_id for _, _, engine_id in found])
        time.sleep(0.1)
    raise RuntimeError(f"the {role} sim did not start within 60 s:\n{process.log.read_text()[-3000:]}")


@dataclass
class Router:
    name: str
    process: Process
    url: str
    body_extra: dict[str, Any] = field(default_factory=dict)  # merged into every request it is sent
    engines: DynamoDeployment | None = None  # a path that brings its own engines (Dynamo's mockers)
    metrics_url: str | None = None  # a motor coordinator's /metrics (its kv_cache_affinity figures)

    def stop(self) -> None:
        self.process.stop()
        if self.engines is not None:
            self.engines.stop()


@dataclass(frozen=True)
class PathSpec:
    kind: str  # "motor", "vllm-router" or "dynamo"
    policy: str  # a motor policy (`motor_policy`), a vllm-router POLICY or POLICY@N, or a Dynamo router mode
    workers: int = 1  # motor's coordinator workers


def start_path(path: PathSpec, cluster: Cluster, work: Path, args: argparse.Namespace) -> Router:
    if path.kind == "motor":
        return start_motor(path.policy, path.workers, cluster, work)
    if path.kind == "dynamo":
        return start_dynamo(path.policy, cluster.scenario, work)
    return start_vllm_router(path.policy, cluster.prefill, cluster.decode, work)


def start_motor(spec: str, workers: int, cluster: Cluster, work: Path) -> Router:
    """A controller-less coordinator with `workers` workers for the policy `spec` (`motor_policy`);
    kv_cache_affinity's kv_index comes from the plan (the engines' block size, sha256, the PYTHONHASHSEED of
    env.json's motor_common_env: HASH_SEED)."""
    prefill, decode = cluster.prefill, cluster.decode
    policy, weights = motor_policy(spec)
    scheduling: dict[str, Any] = {"dispatch_profile": "prefill_first", "scheduler_type": policy}
    if policy == "pd_aware":
        scheduling |= admission_bounds(cluster.scenario.model)
    if weights:
        scheduling["kv_affinity"] = weights
    infer_port, mgmt_port = free_port(), free_port()
    directory = work / f"motor-{policy}-w{workers}-{infer_port}"
    directory.mkdir()
    engine = {"engine_type": "sim", "engine_config": {"served_model_name": MODEL}}
    user: dict[str, Any] = {
        "version": "v2.0",
        "motor_deploy_config": {
            "deploy_mode": "local",
            "p_instances_num": len(prefill.ports),
            "d_instances_num": len(decode.ports),
        },
        "motor_coordinator_config": {
            "logging_config": {"log_level": "WARNING"},
            "api_config": {"coordinator_api_infer_port": infer_port, "coordinator_api_mgmt_port": mgmt_port},
            "scheduler_config": scheduling,
            "inference_workers_config": {"num_workers": workers},
            "timeout_config": {"request_timeout": 120, "read_timeout": 120},
            "exception_config": {"first_token_timeout": 120, "infer_timeout": 600},
        },
        "motor_engine_prefill_config": engine,
        "motor_engine_decode_config": engine,
    }
    env = {"version": "2.0.0", "motor_common_env": {"PYTHONHASHSEED": HASH_SEED}}
    plan = build_plan(load_documents(user, env), config_dir=str(directory))
    spec_path = directory / "coordinator.spec.json"
    coordinator = CoordinatorSpec.model_validate_json(plan.files[spec_path.name])
    # the benchmark's pool is not in the config, so the plan gives the index no pool tier: add the running one's
    if coordinator.kv_index is not None:
        index = coordinator.kv_index.model_copy(update={"pool": cluster.pool_tier()})
        coordinator = coordinator.model_copy(update={"kv_index": index})
    spec_path.write_text(coordinator.model_dump_json())
    process = spawn(
        f"motor-{policy}-w{workers}",
        [sys.executable, "-m", "motor.coordinator", "--spec", str(spec_path)],
        infer_port,
        work,
        env={"MOTOR_CONTROLLER_TOKEN": REFRESH_TOKEN},  # what `refresh` pushes the instances with
    )
    instances = [
        {
            "id": engine_id,
            "role": role,
            "engine_id": engine_id,
            "model_name": MODEL,
            "endpoints": [engines.endpoint(index)],
        }
        for role, engines in (("prefill", prefill), ("decode", decode))
        for index, engine_id in enumerate(engines.engine_ids)
    ]
    try:
        wait_http(process, f"http://127.0.0.1:{mgmt_port}/startup")
        refresh(mgmt_port, instances)
    except BaseException:
        process.stop()
        raise
    return Router(
        f"motor {spec}/w{workers}",
        process,
        f"http://127.0.0.1:{infer_port}",
        metrics_url=f"http://127.0.0.1:{mgmt_port}/metrics" if policy == KV_EVENTS_POLICY else None,
    )


def start_vllm_router(spec: str, prefill: Engines, decode: Engines, work: Path) -> Router:
    """vllm-router with the policy `spec` names: `POLICY`, or `POLICY@N` for its global concurrency limit
    (`--max-concurrent-requests N`, queueing the rest up to the admission queue's 2 s, as pd_aware waits)."""
    policy, _, limit = spec.partition("@")
    port, metrics_port = free_port(), free_port()
    binary = Path(sys.executable).parent / "vllm-router"
    args = [
        str(binary),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--vllm-pd-disaggregation",
        "--policy",
        policy,
    ]
    for engine_port in prefill.ports:
        args += ["--prefill", f"http://127.0.0.1:{engine_port}"]
    for engine_port in decode.ports:
        args += ["--decode", f"http://127.0.0.1:{engine_port}"]
    args += [
        "--prometheus-host",
        "127.0.0.1",
        "--prometheus-port",
        str(metrics_port),
        "--log-level",
        "warning",
    ]
    args += ["--request-timeout-secs", "600", "--disable-retries", "--disable-circuit-breaker"]
    if limit:
        args += ["--max-concurrent-requests", limit, "--queue-size", "1000"]
        args += ["--queue-timeout-secs", f"{ADMISSION_QUEUE_TIMEOUT_S:g}"]
    process = spawn(f"vllm-router-{policy}", args, port, work)
    try:
        wait_http(process, f"http://127.0.0.1:{port}/health", timeout_s=60)
    except BaseException:
        process.stop()
        raise
    name = f"vllm-router {policy}" + (f" max {limit}" if limit else "")
    return Router(name, process, f"http://127.0.0.1:{port}")


@functools.cache
def dynamo_calibration(work: Path, scenario: Scenario) -> tuple[Path, float, Path]:
    """(the mocker's model directory, its tokenizer's tokens per sim token, its timing tables) for `scenario`,
    made once per run: see benchmarks/dynamo_peer.py for what is matched."""
    model_dir = tiny_model_dir(work, max_model_len=4 * ENGINE_MAX_MODEL_LEN)
    ratio = tokens_per_word(model_dir, [" ".join(_words(random.Random(0), 4000))])
    tables = perf_tables(
        scenario.model,
        ratio,
        max_prompt_tokens=math.ceil(ENGINE_MAX_MODEL_LEN * ratio),
        max_kv_tokens=math.ceil(ENGINE_BLOCKS * BLOCK_SIZE * ratio),
    )
    return model_dir, ratio, write_perf_data(work / "mocker_perf.npz", tables)


def start_dynamo(router_mode: str, scenario: Scenario, work: Path) -> Router:
    """Dynamo's frontend (`--router-mode ROUTER_MODE`) over as many disaggregated prefill and decode mocker
    workers as the scenario has engines per role, with the sim engines' KV budgets, token budgets and step
    costs per word of prompt; a fresh deployment per row (its caches cold until the row's warm-up)."""
    model_dir, ratio, perf_data = dynamo_calibration(work, scenario)

    def flags_of(role: str) -> list[str]:
        blocks = scenario.prefill_blocks if role == "prefill" else ENGINE_BLOCKS
        max_model_len = math.ceil(min(ENGINE_MAX_MODEL_LEN, blocks * BLOCK_SIZE) * ratio)
        extra = ["--max-model-len", str(max_model_len)]
        return [
            *mocker_flags(scenario.model, ratio, blocks, perf_data, ENGINE_MAX_SEQS, extra),
            *role_flags(scenario.model, ratio, role, scenario.engines),
        ]

    deployment = start_deployment(
        work,
        engines=scenario.engines,
        router_mode=router_mode,
        model_dir=model_dir,
        served_name=MODEL,
        flags_of=flags_of,
    )
    return Router(
        f"dynamo {router_mode} (disagg)",
        deployment.frontend,
        deployment.url,
        body_extra=NVEXT_TOKEN_EVENTS,
        engines=deployment,
    )


def tree_cpu_seconds(pid: int) -> float:
    """User + system time of a process and its live descendants (a launcher may run the router as a child)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    total, stack = 0.0, [pid]
    while stack:
        current = stack.pop()
        try:
            total += process_seconds(current)
        except OSError:
            continue
        stack.extend(children.get(current, ()))
    return total


# ---- engine metrics ----------------------------------------------------------------------------------------


ENGINE_SERIES = {
    ("vllm:prompt_tokens_total", ""): "prompt",
    ("vllm:prompt_tokens_cached_by_source_total", "external_unspecified"): "pool",
    ("vllm:prompt_tokens_cached_by_source_total", "p2p"): "handover",
    ("vllm:prompt_tokens_by_source_total", "local_cache_hit"): "local",
    ("vllm:num_requests_running", ""): "running",
    ("vllm:num_requests_waiting", ""): "waiting",
}


def engine_counters(engines: Engines) -> dict[str, float]:
    """Summed over the engines: prompt tokens, pool hits, KV handed over by a prefill, local cache hits,
    requests running and waiting."""
    totals = dict.fromkeys(ENGINE_SERIES.values(), 0.0)
    for port in engines.ports:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            text = response.read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                key = ENGINE_SERIES.get((sample.name, sample.labels.get("source", "")))
                if key is not None:
                    totals[key] += sample.value
    return totals


KV_SERIES = {  # kv_cache_affinity's counters on the coordinator's /metrics (summed over its workers), by label
    "motor_coordinator_kv_predictions_total": "outcome",
    "motor_coordinator_kv_pool_queries_total": "answer",
}


def coordinator_kv_counters(url: str | None) -> dict[tuple[str, str], float]:
    """(series, label value) -> count: the prefill legs by how the cached tokens the coordinator expected compare
    with what the engine reported, and the pool queries by whether the pool answered."""
    if url is None:
        return {}
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    totals: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            label = KV_SERIES.get(sample.name)
            if label is not None:
                key = (sample.name, sample.labels.get(label, ""))
                totals[key] = totals.get(key, 0.0) + sample.value
    return totals


def describe_kv_counters(before: dict[tuple[str, str], float], after: dict[tuple[str, str], float]) -> str:
    """What a row added, e.g. `predicted: exact 150, within_block 3; pool: answered 40`."""
    parts = []
    for series, name in (
        ("motor_coordinator_kv_predictions_total", "predicted"),
        ("motor_coordinator_kv_pool_queries_total", "pool"),
    ):
        added = sorted(
            (label, count - before.get((s, label), 0.0)) for (s, label), count in after.items() if s == series
        )
        if any(count for _, count in added):
            parts.append(f"{name}: " + ", ".join(f"{label} {count:g}" for label, count in added if count))
    return "; ".join(parts)


def wait_idle(cluster: list[Engines], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(c["running"] + c["waiting"] == 0 for c in map(engine_counters, cluster)):
            return
        time.sleep(0.5)
    raise RuntimeError("the engines did not drain")


# ---- load --------------------------------------------------------------------------------------------------


async def send(
    session: aiohttp.ClientSession, url: str, turn: Turn, salt: str, extra: dict[str, Any]
) -> Outcome:
    body = {"model": MODEL, "prompt": turn.prompt(salt), "max_tokens": turn.max_tokens, "ignore_eos": True}
    body |= {"stream": True, "temperature": 0, **extra}
    started = time.perf_counter()
    try:
        async with session.post(f"{url}/v1/completions", json=body) as response:
            if response.status != 200:
                return Outcome(False, error=f"HTTP {response.status}")
            outcome = Outcome(False)
            last = 0.0
            async for line in response.content:
                if not line.startswith(b"data: {") or not json.loads(line[6:]).get("choices"):
                    continue  # [DONE], or a usage chunk
                now = time.perf_counter()
                if outcome.tokens == 0:
                    outcome.ttft_s = now - started
                else:
                    outcome.gaps_s.append(now - last)
                last = now
                outcome.tokens += 1
            outcome.ok = outcome.tokens >= turn.max_tokens
            if not outcome.ok:
                outcome.error = f"{outcome.tokens} of {turn.max_tokens} tokens"
            return outcome
    except (TimeoutError, aiohttp.ClientError) as exc:
        return Outcome(False, error=type(exc).__name__)


def _client() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=300)
    )


async def open_loop(url: str, turns: list[Turn], salt: str, extra: dict[str, Any]) -> list[Outcome]:
    async with _client() as session:
        start = time.perf_counter()

        async def one(turn: Turn) -> Outcome:
            await asyncio.sleep(max(0.0, start + turn.at_s - time.perf_counter()))
            late = time.perf_counter() - start - turn.at_s
            outcome = await send(session, url, turn, salt, extra)
            outcome.late_s = late
            return outcome

        return list(await asyncio.gather(*(one(turn) for turn in turns)))


async def warm_up(
    url: str, prefixes: list[tuple[str, ...]], salt: str, concurrency: int, extra: dict[str, Any]
) -> int:
    """Send every prefix once for one token, `concurrency` at a time, through the path (not measured), so the
    engines' caches, and what the router knows of them, start the row warm. Returns how many failed."""
    slots = asyncio.Semaphore(concurrency)
    async with _client() as session:

        async def one(words: tuple[str, ...]) -> Outcome:
            async with slots:
                return await send(session, url, Turn(0.0, -1, 0, words, 1), salt, extra)

        outcomes = await asyncio.gather(*(one(words) for words in prefixes))
    return sum(not outcome.ok for outcome in outcomes)


# ---- one measurement ---------------------------------------------------------------------------------------


@dataclass
class Row:
    path: str
    rate: float
    requests: int
    goodput: float
    tokens_per_s: float  # output tokens of the completed requests, from the first send to the last answer
    ttft_p50: float
    ttft_p90: float
    ttft_p99: float
    itl_p50: float
    itl_p99: float
    errors: int
    refused: float  # share of the requests answered with an HTTP error
    pool_hit: float
    local_hit: float
    handover: float
    cpu_us: float
    client_cpu: float  # share of a core the load generator used over the run
    sims_cpu: float  # share of a core the two sim processes used together
    late_p99: float  # the load generator's send lag, P99
    load: float
    first_error: str = ""
    attempts: int = 1  # measured again when the machine was starved
    kv_figures: str = ""  # kv_cache_affinity's own view of the row (`describe_kv_counters`)


def measure(
    router: Router,
    rate: float,
    turns: list[Turn],
    prefixes: list[tuple[str, ...]],
    cluster: Cluster,
    args: argparse.Namespace,
    run: int,
) -> Row:
    """One row: the warm-up with `prefixes` (when there are any), then `turns` on their schedule."""
    prefill, decode = cluster.prefill, cluster.decode
    salt = f"run{run}x{os.getpid()}"
    if prefixes:
        failed = uvloop.run(warm_up(router.url, prefixes, salt, cluster.scenario.engines, router.body_extra))
        if failed:
            print(f"{router.name}: {failed} of {len(prefixes)} warm-up requests failed")

    def counters() -> tuple[dict[str, float], dict[str, float]]:
        if router.engines is not None:
            return router.engines.counters()
        return engine_counters(prefill), engine_counters(decode)

    before, decode_before = counters()
    kv_before = coordinator_kv_counters(router.metrics_url)
    sims = router.engines.pids() if router.engines else [prefill.process.popen.pid, decode.process.popen.pid]
    cpu_before = tree_cpu_seconds(router.process.popen.pid)
    sims_before, client_before = sum(map(process_seconds, sims)), time.process_time()
    wall = time.perf_counter()
    outcomes = uvloop.run(open_loop(router.url, turns, salt, router.body_extra))
    wall = time.perf_counter() - wall
    cpu = tree_cpu_seconds(router.process.popen.pid) - cpu_before
    sims_cpu = sum(map(process_seconds, sims)) - sims_before
    client_cpu = time.process_time() - client_before
    after, decode_after = counters()
    kv_after = coordinator_kv_counters(router.metrics_url)
    prompt = max(1.0, after["prompt"] - before["prompt"])
    decode_prompt = max(1.0, decode_after["prompt"] - decode_before["prompt"])
    ok = [o for o in outcomes if o.ok]
    ttfts = [o.ttft_s for o in ok]
    gaps = [gap for o in ok for gap in o.gaps_s]
    errors = [o.error for o in outcomes if not o.ok]
    return Row(
        router.name,
        rate,
        len(outcomes),
        goodput(outcomes, args.duration, args.ttft_slo, args.itl_slo),
        sum(o.tokens for o in ok) / wall,
        percentile(ttfts, 0.5),
        percentile(ttfts, 0.9),
        percentile(ttfts, 0.99),
        percentile(gaps, 0.5),
        percentile(gaps, 0.99),
        len(errors),
        sum(error.startswith("HTTP") for error in errors) / max(1, len(outcomes)),
        (after["pool"] - before["pool"]) / prompt,
        (after["local"] - before["local"]) / prompt,
        (decode_after["handover"] - decode_before["handover"]) / decode_prompt,
        cpu / max(1, len(outcomes)) * 1e6,
        client_cpu / wall,
        sims_cpu / wall,
        percentile([o.late_s for o in outcomes], 0.99),
        os.getloadavg()[0],
        errors[0] if errors else "",
        kv_figures=describe_kv_counters(kv_before, kv_after),
    )


def measure_least_starved(
    path: PathSpec,
    rate: float,
    turns: list[Turn],
    prefixes: list[tuple[str, ...]],
    cluster: Cluster,
    args: argparse.Namespace,
    work: Path,
    runs: Iterator[int],
) -> Row:
    """The row of `path` at `rate`, measured again (up to --starved-retries times) while the client was
    starved; the least starved attempt."""
    attempts: list[Row] = []
    for attempt in range(1 + args.starved_retries):
        router = start_path(path, cluster, work, args)
        try:
            row = measure(router, rate, turns, prefixes, cluster, args, next(runs))
        finally:
            router.stop()
        row.attempts = attempt + 1
        attempts.append(row)
        print_rows([row], args)
        if router.engines is None:
            wait_idle([cluster.prefill, cluster.decode])
        if row.late_p99 <= args.max_send_lag:
            break
    return min(attempts, key=lambda row: row.late_p99)


def paths(args: argparse.Namespace) -> Iterator[PathSpec]:
    for policy in args.motor_policies:
        for workers in args.workers:
            yield PathSpec("motor", policy, workers)
    for policy in args.router_policies:
        yield PathSpec("vllm-router", policy)
    for mode in args.dynamo:
        yield PathSpec("dynamo", mode)


def pct(share: float) -> str:
    return f"{share:.0%}" if math.isfinite(share) else "-"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:8.0f}" if math.isfinite(seconds) else f"{'-':>8}"


def print_rows(rows: list[Row], args: argparse.Namespace) -> None:
    print(
        f"\ngoodput = requests/s with TTFT ≤ {args.ttft_slo:g} s and ITL P99 ≤ {args.itl_slo * 1e3:g} ms, "
        f"{args.duration:g} s of arrivals per row; tok/s: output tokens/s; refused: HTTP errors / requests; "
        "client/sims: share of a core; late: the client's send lag P99"
    )
    print(
        f"{'path':<34} {'rate':>5} {'reqs':>5} {'goodput':>8} {'tok/s':>6} {'ttft p50':>8} {'ttft p90':>8} "
        f"{'ttft p99':>8} {'itl p50':>8} {'itl p99':>8} {'errors':>6} {'refused':>7} {'pool hit':>8} "
        f"{'local hit':>9} {'handover':>8} {'cpu µs/req':>10} {'client':>6} {'sims':>5} {'late ms':>7} "
        f"{'load':>5} {'tries':>5}"
    )
    for r in sorted(rows, key=lambda r: (r.rate, r.path)):
        print(
            f"{r.path:<34} {r.rate:>5g} {r.requests:>5} {r.goodput:>8.2f} {r.tokens_per_s:>6.0f} {ms(r.ttft_p50)} "
            f"{ms(r.ttft_p90)} {ms(r.ttft_p99)} {ms(r.itl_p50)} {ms(r.itl_p99)} {r.errors:>6} {r.refused:>7.0%} "
            f"{r.pool_hit:>8.0%} {r.local_hit:>9.0%} {pct(r.handover):>8} {r.cpu_us:>10.0f} {r.client_cpu:>6.0%} "
            f"{r.sims_cpu:>5.0%} {r.late_p99 * 1e3:>7.0f} {r.load:>5.1f} {r.attempts:>5}"
            + (f"  ({r.first_error})" if r.first_error else "")
            + (f"  [{r.kv_figures}]" if r.kv_figures else "")
        )


PLOTTED = (  # (panel title, y label, what of a row)
    ("goodput", "requests/s within SLO", lambda r: r.goodput),
    ("output tokens/s", "tokens/s", lambda r: r.tokens_per_s),
    ("TTFT P90", "seconds", lambda r: r.ttft_p90),
    ("TTFT P99", "seconds", lambda r: r.ttft_p99),
)


@skipped_without_matplotlib
def plot(rows: list[Row], duration_s: float, path: Path, title: str) -> None:
    """Goodput, output tokens/s and TTFT P90 and P99 against the requests actually sent per second (sessions
    ramp up from time 0, so fewer than the nominal rate)."""
    fig, axes = figure(2, 2, height=4.5)
    fig.suptitle(textwrap.fill(title, 140), fontsize=8)
    panels = [axes[0][0], axes[0][1], axes[1][0], axes[1][1]]
    for name in dict.fromkeys(r.path for r in rows):
        mine = sorted((r for r in rows if r.path == name), key=lambda r: r.rate)
        style = "-o" if name.startswith("motor") else "--s"
        sent = [r.requests / duration_s for r in mine]
        for axis, (_, _, value) in zip(panels, PLOTTED, strict=True):
            axis.plot(sent, [value(r) for r in mine], style, label=name)
    for axis, (title_text, ylabel, _) in zip(panels, PLOTTED, strict=True):
        axis.set(xlabel="requests sent per second", ylabel=ylabel, title=title_text)
    panels[0].legend(fontsize=7)
    save(fig, path)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="4P+4D, rates 5 and 10, 20 s each: a few minutes"
    )
    parser.add_argument(
        "--scenario",
        choices=SCENARIOS,
        default=SCENARIOS[0],
        help="shared-pool: every prefill reads the pool; cache-pressure: tenants' prefixes need 70 %% of the "
        "prefill engines' KV, which never read the pool (see the module's doc)",
    )
    parser.add_argument(
        "--engines",
        type=int,
        default=8,
        help="prefill engines, and as many decode engines (16 for 16P+16D); shared-pool: their decode steps "
        "cost N/4 as much per sequence as the reference 4P+4D engine's, so every size saturates near the same rate",
    )
    parser.add_argument(
        "--popularity-exponent",
        type=float,
        default=0.0,
        help="cache-pressure: tenant k is picked with weight 1 / (k + 1) ** this (0: uniformly popular; 2: the "
        "first tenant takes about 60 %% of the sessions)",
    )
    parser.add_argument("--rates", default="5,8,12", help="offered requests/s, comma-separated")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of arrivals per run")
    parser.add_argument(
        "--motor-policies",
        default=",".join(MOTOR_POLICIES),
        help="scheduler_types, comma-separated; kv_cache_affinity@KEY=VALUE;KEY=VALUE sets its kv_affinity keys "
        "(e.g. 'kv_cache_affinity@prefill_load_scale=10')",
    )
    parser.add_argument(
        "--workers", default="1", help="coordinator worker counts, comma-separated: one motor path each"
    )
    parser.add_argument(
        "--router-policies",
        help="vllm-router policies, POLICY or POLICY@N (with --max-concurrent-requests N); default: "
        f"{','.join(ROUTER_POLICIES)} and cache_aware@N, N = pd_aware's decode bound × the decode engines",
    )
    parser.add_argument(
        "--dynamo",
        default="",
        help="Dynamo 1.6.1 router modes to run as paths (e.g. kv: its KV router), comma-separated; each is a "
        "frontend over its own disaggregated mocker workers calibrated to the sim engines (needs "
        "scripts/install_dynamo.sh; the run moves into a loopback-only network namespace)",
    )
    parser.add_argument("--ttft-slo", type=float, default=2.0, help="seconds")
    parser.add_argument("--itl-slo", type=float, default=0.1, help="seconds, a request's own ITL P99")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--max-send-lag",
        type=float,
        default=0.1,
        help="seconds: a row whose client sent its requests later than this (P99) ran on a starved machine "
        "(other jobs on the host) and is measured again, up to --starved-retries times",
    )
    parser.add_argument("--starved-retries", type=int, default=2)
    parser.add_argument("--plot", type=Path, default=default_plot_path("cluster_scheduling"))
    args = parser.parse_args()
    if args.quick:
        args.engines, args.rates, args.duration = 4, "5,10", 20.0
    args.motor_policies = [p for p in args.motor_policies.split(",") if p]
    for spec in args.motor_policies:
        try:
            motor_policy(spec)
        except ValueError as exc:
            parser.error(f"--motor-policies: {exc}")
    args.workers = [int(w) for w in args.workers.split(",") if w]
    if args.router_policies is None:
        limit = (
            admission_bounds(make_scenario(args.scenario, args.engines, args.popularity_exponent).model)[
                "admission_max_decode_requests"
            ]
            * args.engines
        )
        args.router_policies = ",".join((*ROUTER_POLICIES, f"cache_aware@{limit:g}"))
    args.router_policies = [p for p in args.router_policies.split(",") if p]
    args.rates = [float(rate) for rate in args.rates.split(",")]
    args.dynamo = [mode for mode in args.dynamo.split(",") if mode]
    return args


def run_rows(args: argparse.Namespace, scenario: Scenario, work: Path, store_config: Path) -> list[Row]:
    """Every path at every rate, on one cluster of engines started here (stopped by pid at the end)."""
    routes_on_events = any(motor_policy(spec)[0] == KV_EVENTS_POLICY for spec in args.motor_policies)
    kv_events = kv_events_config(work) if routes_on_events else None
    started: list[Process] = []
    try:
        prefill = start_engines("prefill", scenario, store_config, work, kv_events)
        started.append(prefill.process)
        decode = start_engines("decode", scenario, store_config, work, None)
        started.append(decode.process)
        cluster = Cluster(scenario, prefill, decode, store_config)
        runs = itertools.count(1)
        rows: list[Row] = []
        for rate in args.rates:
            turns = make_workload(rate, args.duration, args.seed, scenario.shape)
            prefixes = system_prompts(rate, args.duration, args.seed, scenario.shape)
            prefixes = prefixes if scenario.cache_pressure else []
            for path in paths(args):
                rows.append(measure_least_starved(path, rate, turns, prefixes, cluster, args, work, runs))
        return rows
    finally:
        for process in started:
            process.stop()


def main() -> None:
    args = parse_args()
    if args.dynamo:
        enter_loopback_namespace()
    scenario = make_scenario(args.scenario, args.engines, args.popularity_exponent)
    # a kill ends the run through the cleanup below (the engines, pool and router are stopped by pid)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    print(scenario.describe())
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
        work = Path(tmp)
        master = start_pool(work)
        try:
            store_config = work / "store.json"
            store_config.write_text(json.dumps(master.store_config()))
            rows = run_rows(args, scenario, work, store_config)
        finally:
            master.stop()
    print(f"\ncpus: {os.cpu_count()}, load average at the end: {os.getloadavg()}\n{scenario.describe()}")
    print_rows(rows, args)
    plot(rows, args.duration, args.plot, scenario.describe())


if __name__ == "__main__":
    main()
