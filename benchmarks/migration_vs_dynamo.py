"""A stream's engine killed mid-stream under load: motor's replay through the KV pool against Dynamo's request
migration, turn by turn in one run.

- motor: a coordinator (prefill_first, exception_config.reschedule_config on, circuit breakers at their
  defaults) in front of 1 prefill and 2 decode sim engines and a real mooncake_master; the prefill engine
  writes each prompt's KV to the pool, a replay's prefill reads it back and computes only what the stream had
  generated.
- Dynamo 1.6.1: its frontend (`--router-mode kv --migration-limit 3`) in front of mocker workers, one process
  each: by default disaggregated like motor's side (1 prefill, 2 decode workers; `--dynamo-mode agg`: 2
  aggregated workers). A migrated request is sent again with its prompt and the tokens generated so far; the
  worker that prefills it computes what its own prefix cache does not hold (disaggregated: the prefill worker
  still has the prompt; aggregated: the surviving worker computes it all).

Both sides are timed by the same capacity model (motor's sim: `--capacity-model`; the mocker: tables filled
from the same model, per word of prompt: benchmarks/dynamo_peer.py). Each turn sends streamed greedy
completions open loop at --rate for --duration seconds, every prompt a fresh --prompt-words words (no prefix
shared with another request), --max-tokens output tokens each; at --kill-at seconds it SIGKILLs the engine
serving the most streams (motor: a decode engine; Dynamo: a decode or aggregated worker), lets every stream
end, starts a fresh engine in its place and goes on with the other setup. Per turn and setup it records:

- streams broken: ended with an error, a cut connection or fewer tokens than asked;
- streams resumed (motor: `motor_coordinator_replays_total{outcome="resumed"}`; Dynamo:
  `dynamo_frontend_model_migration_total{migration_type="ongoing_request"}`) and their resume gap at the
  client: the last token event before the kill → the first after it, over the streams with the largest such
  gaps, as many as were resumed, leaving out any no longer than 3 median inter-token gaps (not a pause the
  client saw);
- prompt tokens recomputed because of the kill, per resumed stream: what the engines computed in the turn
  (motor: the prefill engine's `local_compute` tokens; Dynamo: the router's input tokens of its
  prefill-placing decisions less the prefix it found cached on the chosen worker) less each request's prompt
  once, over the resumed streams. Requests that had no token when their engine died are sent again too (motor:
  retried from the start, with 513-token prompts, 32 full blocks and 1, a retry finds the prompt cached and
  computes 1 token; Dynamo: a "new_request" migration, routed again to a prefill worker that holds the
  prompt); their recomputation counts here.

It prints the per-turn rows and P50/P99 per setup, motor's resume gap P99 against issue 23's 1 s at 20 req/s,
and writes a plot. Runs in a loopback-only network namespace (see dynamo_peer.py); everything it starts is
stopped by pid.

    .venv/bin/python benchmarks/migration_vs_dynamo.py [--turns 3] [--rate 20] [--duration 8] [--kill-at 4]
        [--prompt-words 513] [--max-tokens 64] [--dynamo-mode disagg|agg] [--setups motor,dynamo] [--verbose]
"""

import argparse
import asyncio
import datetime
import itertools
import json
import math
import os
import random
import signal
import statistics
import string
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cluster_scheduling import start_pool
from dynamo_peer import (
    NVEXT_TOKEN_EVENTS,
    Mocker,
    dynamo_versions,
    enter_loopback_namespace,
    mocker_flags,
    perf_tables,
    role_flags,
    start_frontend,
    start_mocker,
    tiny_model_dir,
    tokens_per_word,
    wait_workers,
    write_perf_data,
)
from plotting import default_plot_path, figure, save, skipped_without_matplotlib
from prometheus_client.parser import text_string_to_metric_families
from replay_resume import REPLAY

from motor.engine.sim.capacity import CapacityModel
from motor.engine.sim.cli import capacity_flags
from tests.fixtures.coordinator import CoordinatorProcess, engine_metric, sim_instance, start_coordinator
from tests.fixtures.sim import SimEngine, start_sim_engine

# Both sides' engines: a 512-word prompt prefills in 26 ms, a decode step of a dozen 600-token streams takes
# about 20 ms (the chaos harness's inter-token latency); 4,096 blocks of 16 tokens of KV per engine.
ENGINE_MODEL = CapacityModel(
    enabled=True,
    prefill_tokens_per_s=20000,
    max_num_batched_tokens=2048,
    step_overhead_ms=15.0,
    decode_ms_per_seq=0.3,
    decode_ms_per_1k_context=0.2,
)
ENGINE_BLOCKS = 4096
MAX_NUM_SEQS = 256
SIM_MODEL = "sim-model"
DYNAMO_MODEL = "tiny"
COMPUTED = 'vllm:prompt_tokens_by_source_total{source="local_compute"}'
RESUMED = "motor_coordinator_replays_total"
STREAM_DEADLINE_S = 120.0
PAUSE_ITLS = 3  # a gap longer than this many median inter-token gaps is a pause, not a token's step
# replay_resume's replay settings with circuit breakers on (motor's default): after 3 failed legs the killed
# engine gets none until it is replaced (a new instance), as a controller would remove it
COORDINATOR = {key: value for key, value in REPLAY.items() if key != "circuit_config"}


# ---- the load (shared by both setups) ----------------------------------------------------------------------


def prompt(turn: int, index: int, words: int) -> str:
    """A fresh prompt: its first word names the request, the rest are seeded three-letter words (one token
    each for the sim, about three for the mocker's tokenizer)."""
    rng = random.Random(f"{turn}:{index}")
    return " ".join(
        [f"t{turn}r{index}", *("".join(rng.choices(string.ascii_lowercase, k=3)) for _ in range(words - 1))]
    )


@dataclass
class Stream:
    """One streamed request as the client saw it."""

    token_times: list[float] = field(default_factory=list)
    prompt_tokens: int | None = None
    error: str = ""
    ended_done: bool = False

    def complete(self, max_tokens: int) -> bool:
        return not self.error and self.ended_done and len(self.token_times) >= max_tokens

    def gap_across(self, instant: float) -> float | None:
        """Last token event before `instant` → first after it; None unless the stream had tokens on both
        sides."""
        before = [t for t in self.token_times if t <= instant]
        after = [t for t in self.token_times if t > instant]
        return after[0] - before[-1] if before and after else None


async def one_stream(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> Stream:
    stream = Stream()
    try:
        async with session.post(f"{url}/v1/completions", json=body) as response:
            if response.status != 200:
                stream.error = f"HTTP {response.status}"
                return stream
            async for line in response.content:
                if line.startswith(b"data: [DONE]"):
                    stream.ended_done = True
                    continue
                if not line.startswith(b"data: {"):
                    continue
                event = json.loads(line[6:])
                if "error" in event:
                    stream.error = str(event["error"])[:200]
                if event.get("usage"):
                    stream.prompt_tokens = event["usage"].get("prompt_tokens")
                if event.get("choices"):
                    stream.token_times.append(time.perf_counter())
    except (TimeoutError, aiohttp.ClientError) as exc:
        stream.error = type(exc).__name__
    return stream


async def open_loop(
    url: str,
    bodies: list[dict[str, Any]],
    rate: float,
    kill_at_s: float,
    kill: Callable[[], float],
) -> tuple[list[Stream], float]:
    """Send `bodies` at `rate` from now, kill at `kill_at_s`, wait for every stream; (streams, the kill's
    instant)."""
    timeout = aiohttp.ClientTimeout(total=STREAM_DEADLINE_S)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as session:
        start = time.perf_counter()

        async def send(index: int, body: dict[str, Any]) -> Stream:
            await asyncio.sleep(max(0.0, start + index / rate - time.perf_counter()))
            return await one_stream(session, url, body)

        async def killer() -> float:
            await asyncio.sleep(max(0.0, start + kill_at_s - time.perf_counter()))
            return await asyncio.to_thread(kill)  # the instant of the SIGKILL, not of this task's wake-up

        kill_task = asyncio.create_task(killer())
        streams = await asyncio.gather(*(send(i, body) for i, body in enumerate(bodies)))
        return list(streams), await kill_task


# ---- the two setups ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Counters:
    resumed: float  # streams resumed after output had reached the client
    computed: float  # prompt tokens the engines computed

    def __sub__(self, other: "Counters") -> "Counters":
        return Counters(self.resumed - other.resumed, self.computed - other.computed)


class Setup(Protocol):
    name: str
    url: str

    def body(self, text: str, max_tokens: int) -> dict[str, Any]: ...

    def counters(self) -> "Counters": ...

    def kill_busiest(self) -> float:
        """SIGKILL the engine serving the most streams; the instant (time.perf_counter) of the kill."""
        ...

    def replace_killed(self) -> None: ...


def metric_sum(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()


@dataclass
class MotorSetup:
    work: Path
    store: dict[str, Any]
    name: str = "motor"
    prefill: SimEngine | None = None
    decodes: list[SimEngine] = field(default_factory=list)
    coordinator: CoordinatorProcess | None = None
    killed: SimEngine | None = None
    generation: int = 0

    def engine(self, role: str) -> SimEngine:
        self.generation += 1
        store = self.store if role == "prefill" else {**self.store, "global_segment_size": 0}
        flags = [
            *capacity_flags(ENGINE_MODEL), "--num-gpu-blocks-override", str(ENGINE_BLOCKS),
            "--max-num-seqs", str(MAX_NUM_SEQS), "--kv-wait-timeout-s", "10",
            "--kv-bytes-per-token", "16",  # real bytes in the pool; the model times the link itself
        ]  # fmt: skip
        return start_sim_engine(
            self.work / "engines",
            kv_role="kv_producer" if role == "prefill" else "kv_consumer",
            engine_id=f"motor-{role}-{self.generation}",
            store_config=store,
            extra_args=flags,
        )

    def start(self) -> None:
        self.prefill = self.engine("prefill")
        self.decodes = [self.engine("decode"), self.engine("decode")]
        self.coordinator = start_coordinator(
            self.work / "coordinator", profile="prefill_first", coordinator_config=COORDINATOR
        )
        self.register()

    def register(self) -> None:
        assert self.coordinator is not None and self.prefill is not None
        instances = [sim_instance(self.prefill, "prefill")] + [
            sim_instance(d, "decode") for d in self.decodes
        ]
        self.coordinator.register(instances)

    @property
    def url(self) -> str:
        assert self.coordinator is not None
        return self.coordinator.base_url

    def body(self, text: str, max_tokens: int) -> dict[str, Any]:
        return {
            "model": SIM_MODEL, "prompt": text, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True},
        }  # fmt: skip

    def counters(self) -> Counters:
        assert self.coordinator is not None and self.prefill is not None
        _, text = self.coordinator.mgmt_get("/metrics")
        # a request retried before its first token finds its whole prompt cached: it computes 1 token
        return Counters(metric_sum(text, RESUMED, outcome="resumed"), engine_metric(self.prefill, COMPUTED))

    def kill_busiest(self) -> float:
        running = [(engine_metric(d, "vllm:num_requests_running"), d) for d in self.decodes]
        self.killed = max(running, key=lambda pair: pair[0])[1]
        self.killed.process.kill()
        return time.perf_counter()

    def replace_killed(self) -> None:
        assert self.killed is not None
        self.killed.wait_exit(timeout_s=10)
        self.decodes = [d for d in self.decodes if d is not self.killed] + [self.engine("decode")]
        self.killed = None
        self.register()

    def stop(self) -> None:
        for child in [self.coordinator, self.prefill, *self.decodes]:
            if child is not None:
                child.stop()


@dataclass
class DynamoSetup:
    """disagg: a prefill mocker and 2 decode mockers (the decode side is what gets killed); agg: 2 aggregated
    mockers. One worker per process, so a SIGKILL takes one worker."""

    work: Path
    model_dir: Path
    flags: list[str]
    mode: str
    role_flags: Callable[[str], list[str]]
    name: str = "dynamo"
    prefill: Mocker | None = None
    mockers: list[Mocker] = field(default_factory=list)  # the ones a kill picks from
    frontend: Any = None
    killed: Mocker | None = None
    generation: int = 0

    def mocker(self, role: str) -> Mocker:
        self.generation += 1
        flags = [*self.flags, *self.role_flags(role)]
        return start_mocker(
            self.work, f"mocker-{role}-{self.generation}", self.model_dir, DYNAMO_MODEL, flags
        )

    @property
    def serving_role(self) -> str:
        return "decode" if self.mode == "disagg" else "agg"

    def start(self) -> None:
        if self.mode == "disagg":
            self.prefill = self.mocker("prefill")
        self.mockers = [self.mocker(self.serving_role), self.mocker(self.serving_role)]
        self.frontend = start_frontend(
            self.work, "frontend", ["--router-mode", "kv", "--migration-limit", "3"]
        )
        wait_workers(self.frontend, self.generation, len(self.live))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.frontend.port}"

    def body(self, text: str, max_tokens: int) -> dict[str, Any]:
        return {
            "model": DYNAMO_MODEL, "prompt": text, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True},
            **NVEXT_TOKEN_EVENTS,
        }  # fmt: skip

    def counters(self) -> Counters:
        text = fetch(f"{self.url}/metrics")
        # the routing decisions that place prompt work (a disaggregated request is routed twice: prefill and
        # decode)
        phase = "prefill" if self.mode == "disagg" else "aggregated"
        routed = metric_sum(text, "dynamo_component_router_input_sequence_tokens_sum", phase=phase)
        cached = metric_sum(
            text, "dynamo_component_router_kv_selected_cached_prefix_tokens_total", phase=phase
        )
        migrations = "dynamo_frontend_model_migration_total"
        return Counters(metric_sum(text, migrations, migration_type="ongoing_request"), routed - cached)

    def kill_busiest(self) -> float:
        self.killed = max(self.mockers, key=lambda mocker: mocker.inflight())
        return self.killed.kill()

    def replace_killed(self) -> None:
        assert self.killed is not None
        self.mockers = [m for m in self.mockers if m is not self.killed] + [self.mocker(self.serving_role)]
        self.killed = None
        wait_workers(self.frontend, self.generation, len(self.live))

    @property
    def live(self) -> list[Mocker]:
        return [*self.mockers, *([self.prefill] if self.prefill else [])]

    def stop(self) -> None:
        for child in [self.frontend, *(m.process for m in self.live)]:
            if child is not None:
                child.stop()


# ---- one turn ----------------------------------------------------------------------------------------------


@dataclass
class Turn:
    setup: str
    sent: int
    broken: int
    in_flight: int  # streams with a token before the kill and still going at it
    resumed: int
    gaps: list[float]  # the resumed streams' gaps at the client
    recomputed: float  # prompt tokens computed beyond the turn's prompts, per resumed stream
    prompt_tokens: int


def run_turn(setup: Any, turn: int, args: argparse.Namespace) -> Turn:
    count = round(args.rate * args.duration)
    bodies = [setup.body(prompt(turn, i, args.prompt_words), args.max_tokens) for i in range(count)]
    before = setup.counters()
    streams, killed_at = asyncio.run(
        open_loop(setup.url, bodies, args.rate, args.kill_at, setup.kill_busiest)
    )
    delta = setup.counters() - before
    prompt_tokens = next((s.prompt_tokens for s in streams if s.prompt_tokens), 0)
    resumed = round(delta.resumed)
    across = sorted((g for s in streams if (g := s.gap_across(killed_at)) is not None), reverse=True)
    # the resumed streams' gaps: the largest across the kill, as many as were resumed, none an ordinary token
    # gap (a migration the client did not see as a pause, e.g. of a stream with only its first token, is left
    # out)
    itl = statistics.median(b - a for s in streams for a, b in itertools.pairwise(s.token_times))
    gaps = [gap for gap in across[:resumed] if gap > PAUSE_ITLS * itl]
    if args.verbose:
        for stream in streams:
            if not stream.complete(args.max_tokens):
                print(
                    f"{setup.name}: broken: {len(stream.token_times)} tokens, {stream.error or 'no [DONE]'}"
                )
        print(
            f"{setup.name}: gaps across the kill (ms, largest first): {[round(g * 1e3) for g in across[:40]]}"
        )
    in_flight = sum(1 for s in streams if s.token_times and s.token_times[0] <= killed_at < s.token_times[-1])
    # each request's prompt once (a stream that ended without a usage chunk counts the mean)
    reported = [s.prompt_tokens for s in streams if s.prompt_tokens]
    mean_prompt = sum(reported) / max(1, len(reported))
    needed = sum(reported) + mean_prompt * (count - len(reported))
    extra = delta.computed - needed
    setup.replace_killed()
    return Turn(
        setup.name,
        count,
        sum(not s.complete(args.max_tokens) for s in streams),
        in_flight,
        resumed,
        gaps,
        extra / resumed if resumed else math.nan,
        prompt_tokens,
    )


# ---- report ------------------------------------------------------------------------------------------------


def quantile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def print_turns(turns: list[Turn]) -> None:
    print(
        f"{'setup':<7} {'sent':>5} {'broken':>6} {'in flight':>9} {'resumed':>7} "
        f"{'gap P50':>8} {'gap max':>8} {'recomputed/resume':>17} {'prompt tokens':>13}"
    )
    for t in turns:
        print(
            f"{t.setup:<7} {t.sent:>5} {t.broken:>6} {t.in_flight:>9} {t.resumed:>7} "
            f"{quantile(t.gaps, 0.5) * 1e3:>6.0f}ms {max(t.gaps, default=math.nan) * 1e3:>6.0f}ms "
            f"{t.recomputed:>17.0f} {t.prompt_tokens:>13}"
        )


def summary(turns: list[Turn], names: list[str]) -> None:
    print(
        f"\n{'setup':<7} {'kills':>5} {'sent':>5} {'broken':>6} {'resumed':>7} {'gap P50':>8} {'gap P99':>8} "
        f"{'recomputed/resume':>17} {'vs prompt':>9}"
    )
    for name in names:
        mine = [t for t in turns if t.setup == name]
        gaps = [g for t in mine for g in t.gaps]
        resumed = sum(t.resumed for t in mine)
        recomputed = sum(t.recomputed * t.resumed for t in mine if t.resumed) / max(1, resumed)
        prompt_tokens = max(t.prompt_tokens for t in mine)
        print(
            f"{name:<7} {len(mine):>5} {sum(t.sent for t in mine):>5} {sum(t.broken for t in mine):>6} "
            f"{resumed:>7} {quantile(gaps, 0.5) * 1e3:>6.0f}ms {quantile(gaps, 0.99) * 1e3:>6.0f}ms "
            f"{recomputed:>17.0f} {recomputed / max(1, prompt_tokens):>9.0%}"
        )


@skipped_without_matplotlib
def plot(turns: list[Turn], names: list[str], path: Path, title: str) -> None:
    fig, axes = figure(1, 2, width=6.0)
    gaps = [[g * 1e3 for t in turns if t.setup == name for g in t.gaps] for name in names]
    axes[0][0].boxplot(gaps, tick_labels=names)
    axes[0][0].set(title="resume gap at the client", ylabel="ms")
    recomputed = [[t.recomputed for t in turns if t.setup == name and t.resumed] for name in names]
    for index, values in enumerate(recomputed):
        axes[0][1].plot([index + 1] * len(values), values, "o")
    axes[0][1].set(
        title="prompt tokens recomputed per resumed stream",
        xticks=range(1, len(names) + 1),
        xticklabels=names,
        ylabel="tokens (each engine's own)",
    )
    fig.suptitle(textwrap.fill(title, 160), fontsize=8)
    save(fig, path)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=3, help="kills per setup")
    parser.add_argument("--rate", type=float, default=20.0, help="requests per second, open loop")
    parser.add_argument("--duration", type=float, default=8.0, help="seconds of arrivals per turn")
    parser.add_argument("--kill-at", type=float, default=4.0, help="seconds into the turn")
    parser.add_argument(
        "--prompt-words",
        type=int,
        default=513,
        help="words per prompt (one sim token each; 513 = 32 blocks + 1: a retried prompt computes 1 token)",
    )
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument(
        "--dynamo-mode",
        choices=("disagg", "agg"),
        default="disagg",
        help="Dynamo's mockers: disagg (1 prefill + 2 decode, like motor's side) or agg (2 aggregated)",
    )
    parser.add_argument("--setups", default="motor,dynamo", help="comma-separated, in the order alternated")
    parser.add_argument(
        "--verbose", action="store_true", help="print every turn's largest gaps across the kill"
    )
    parser.add_argument("--plot", type=Path, default=default_plot_path("migration_vs_dynamo"))
    return parser.parse_args()


def dynamo_setup(work: Path, args: argparse.Namespace) -> tuple[DynamoSetup, float]:
    longest = args.prompt_words + args.max_tokens
    model_dir = tiny_model_dir(work, max_model_len=8 * longest)
    ratio = tokens_per_word(model_dir, [prompt(0, i, args.prompt_words) for i in range(8)])
    max_kv = math.ceil(ENGINE_BLOCKS * ratio) * 16
    tables = perf_tables(
        ENGINE_MODEL, ratio, max_prompt_tokens=math.ceil(longest * ratio), max_kv_tokens=max_kv
    )
    perf_data = write_perf_data(work / "mocker_perf.npz", tables)
    flags = mocker_flags(ENGINE_MODEL, ratio, ENGINE_BLOCKS, perf_data, MAX_NUM_SEQS, [])
    setup = DynamoSetup(
        work, model_dir, flags, args.dynamo_mode, lambda role: role_flags(ENGINE_MODEL, ratio, role)
    )
    return setup, ratio


def main() -> int:
    args = parse_args()
    enter_loopback_namespace()
    # a kill ends the run through the cleanup below (every engine, router and pool is stopped by pid)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    names = [name for name in args.setups.split(",") if name]
    started = datetime.datetime.now().astimezone()
    load_before = os.getloadavg()[0]
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent
    ).stdout.strip()
    turns: list[Turn] = []
    with tempfile.TemporaryDirectory(prefix="bench-migration-") as tmp, ExitStack() as stack:
        work = Path(tmp)
        setups: list[Any] = []
        ratio = math.nan
        for name in names:
            if name == "motor":
                master = start_pool(work)
                stack.callback(master.stop)
                setup: Any = MotorSetup(work / "motor", master.store_config())
            else:
                setup, ratio = dynamo_setup(work / "dynamo", args)
            setup.work.mkdir(parents=True, exist_ok=True)
            stack.callback(setup.stop)
            setup.start()
            setups.append(setup)
        for turn in range(args.turns):
            for setup in setups:
                result = run_turn(setup, turn * len(setups) + setups.index(setup), args)
                turns.append(result)
                print_turns([result])
        versions = dynamo_versions() if "dynamo" in names else "-"
    title = (
        f"migration_vs_dynamo {started:%Y-%m-%d %H:%M %Z}, commit {commit}: {args.rate:g} req/s for "
        f"{args.duration:g} s per turn, kill at {args.kill_at:g} s, {args.turns} kills per setup, "
        f"{args.prompt_words}-word fresh prompts, {args.max_tokens} tokens; {versions}; mocker tokens per "
        f"word {ratio:.2f}; {os.cpu_count()} cores, load average {load_before:.1f} before / "
        f"{os.getloadavg()[0]:.1f} after"
    )
    print(f"\n{title}")
    print_turns(turns)
    summary(turns, names)
    motor_gaps = [g for t in turns if t.setup == "motor" for g in t.gaps]
    if motor_gaps:
        p99 = quantile(motor_gaps, 0.99)
        verdict = "met" if p99 <= 1.0 else "missed"
        print(
            f"\nissue 23: motor's resume gap P99 {p99 * 1e3:.0f} ms at {args.rate:g} req/s "
            f"(goal ≤ 1 s): {verdict}"
        )
    plot(turns, names, args.plot, title)
    return 0


if __name__ == "__main__":
    sys.exit(main())
