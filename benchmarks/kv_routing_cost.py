"""kv_cache_affinity's decision cost at scale: picks over 1,000 endpoints with 1,000,000 blocks indexed, the KV
event intake that feeds the index, the index's memory, and what preparing a prompt costs (tokenizing, hashing).

**The index** is built the way a coordinator worker builds it: from vLLM-format KV event batches (motor's
`encode_batch`, byte-identical to vLLM's publisher: BlockStored with block hashes, parent hash, 16 token ids a
block, block size, medium), each decoded and applied as the subscriber does (`decode_message`, `KvIndex.apply`).
What the endpoints hold: `--tenants` shared prefixes of 32–160 blocks (Zipf-popular: every endpoint serves 3
tenants, so a popular prefix sits on hundreds of endpoints), then per-endpoint sessions (a tenant's prefix and a
private tail of 4–48 blocks) until the endpoints hold `--blocks` (instance, block) entries in all; session tails
go to the device tier (80 %), the CPU tier (15 %) or disk (5 %). Block hashes are random 64-bit values: the
index keys on the low 64 bits of the engines' digests, which are uniform; what hashing a prompt costs is measured
apart (below).

**Intake** (one process, one core): the fill from empty to `--blocks` (BlockStored batches of 1–8 events), then
churn at full size (each batch evicts a session tail with BlockRemoved and stores a new one), in blocks per CPU
second. **Memory**: tracemalloc's traced bytes after a second fill of an empty index (Python allocations only:
the index's dicts, sets and ints), per million entries.

**Picks** (`Scheduler("kv_cache_affinity")` over the 1,000 endpoints, the compiled decider, default weights):
45 % follow-ups (a session's whole prompt and a new message: a deep match on its endpoint, the prefix on every
holder of the tenant), 35 % new sessions of a tenant (the prefix matches on its holders), 20 % cold prompts (no
block matches). Token ids and block hashes are on the demand before the pick (tokenizing and hashing are
per-request preparation, measured below). Loads and last picks are the policy's own: 10,000 warm-up picks after
4 legs per endpoint are in flight, then each timed pick allocates its leg (its prefill tokens to compute and its
prompt's KV) and releases the oldest in flight (timed too: `+alloc/release`). The index walk (the locator's
answer, part of the pick) is timed again alone on the same prompts. load_balance over the same endpoints and
demands is the baseline. The garbage collector stays on, as in the coordinator.

**Preparation**, per 1,000 prompt tokens: the coordinator's tokenizers (`motor.tokenize`: a model directory's
Hugging Face tokenizer for completions and for chat with its template, on `motor model tiny`'s tokenizer, built
in a temporary directory; the simulator's vocabulary), and the block hashes of the token ids (sha256 over pickle,
vLLM's default, and sha256_cbor).

    .venv/bin/python benchmarks/kv_routing_cost.py [--endpoints 1000] [--blocks 1000000] [--picks 20000]
        [--plot benchmarks/out/kv_routing_cost.png]
"""

import argparse
import gc
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from plotting import default_plot_path, figure, save, skipped_without_matplotlib
from scheduler import make_targets

from motor.coordinator.kv_events.locator import KvLocatorFromIndex
from motor.coordinator.scheduling.demand import Demand
from motor.coordinator.scheduling.scheduler import Scheduler
from motor.kv.block_hashes import BlockHasher
from motor.kv.events import (
    MEDIUM_GPU,
    RemovedBlocks,
    StoredBlocks,
    decode_message,
    encode_batch,
    encode_sequence,
)
from motor.kv.index import KvIndex
from motor.tokenize import HfPromptTokenizer, PromptTokenizer, SimPromptTokenizer
from motor.tokenize.prompt import Api

ROLE = "prefill"
BLOCK = 16
TOPIC = b"kv-events"
TENANTS_PER_ENDPOINT = 3
PREFIX_BLOCKS = (32, 160)
TAIL_BLOCKS = (4, 48)
TIER_MEDIA = (("GPU", 0.80), ("CPU", 0.15), ("STORAGE", 0.05))
EVENTS_PER_BATCH = (1, 8)
IN_FLIGHT_PER_ENDPOINT = 4
WARMUP_PICKS = 10_000
VOCAB = 150_000  # token ids on the wire as a real vocabulary's (their msgpack size), not the tiny model's
PREPARE_TOKENS = (1_000, 8_000)
PREPARE_REPEATS = 30


# ---- what the endpoints hold --------------------------------------------------------------------------------


@dataclass
class Session:
    tenant: int
    tail: list[int]
    medium: str


@dataclass
class Endpoint:
    key: str
    tenants: list[int]
    sessions: deque[Session] = field(default_factory=deque)
    held: int = 0  # (block, tier) entries


@dataclass
class Population:
    prefixes: list[list[int]]
    tenant_weights: list[float]
    endpoints: list[Endpoint]
    fill: list[tuple[str, list[bytes]]]  # (endpoint key, frames) in publishing order
    churn: list[tuple[str, list[bytes]]]
    fill_blocks: int
    churn_blocks: int
    distinct_blocks: int


class Publisher:
    """Each endpoint's batches as its engine publishes them: sequence numbers per endpoint, token ids per block."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.sequence: dict[str, int] = {}
        self.pending: dict[str, list[object]] = {}
        self.token_pool = [rng.randrange(VOCAB) for _ in range(4096)]

    def stored(self, key: str, hashes: list[int], parent: int | None, medium: str) -> None:
        start = self.rng.randrange(len(self.token_pool) - len(hashes) * BLOCK) if hashes else 0
        event = StoredBlocks(
            block_hashes=list(hashes),
            parent_block_hash=parent,
            token_ids=self.token_pool[start : start + len(hashes) * BLOCK],
            block_size=BLOCK,
            lora_id=None,
            medium=medium,
            lora_name=None,
        )
        self.pending.setdefault(key, []).append(event)

    def removed(self, key: str, hashes: list[int], medium: str) -> None:
        self.pending.setdefault(key, []).append(RemovedBlocks(block_hashes=list(hashes), medium=medium))

    def flush(self, out: list[tuple[str, list[bytes]]], key: str, force: bool = False) -> None:
        events = self.pending.get(key, [])
        if not events or (not force and len(events) < self.rng.randint(*EVENTS_PER_BATCH)):
            return
        sequence = self.sequence.get(key, 0)
        self.sequence[key] = sequence + 1
        payload = encode_batch(time.time(), events)  # type: ignore[arg-type]
        out.append((key, [TOPIC, encode_sequence(sequence), payload]))
        self.pending[key] = []


def zipf_weights(n: int, s: float = 1.1) -> list[float]:
    return [1.0 / (rank**s) for rank in range(1, n + 1)]


def populate(endpoints: int, blocks: int, tenants: int, churn_blocks: int, seed: int) -> Population:
    rng = random.Random(seed)
    prefixes = [[rng.getrandbits(64) for _ in range(rng.randint(*PREFIX_BLOCKS))] for _ in range(tenants)]
    weights = zipf_weights(tenants)
    keys = [target.key for target in make_targets(endpoints)]
    hosts: list[Endpoint] = []
    for key in keys:
        chosen: set[int] = set()
        while len(chosen) < TENANTS_PER_ENDPOINT:
            chosen.add(rng.choices(range(tenants), weights)[0])
        hosts.append(Endpoint(key, sorted(chosen)))
    publisher = Publisher(rng)
    fill: list[tuple[str, list[bytes]]] = []
    # every endpoint first stores its tenants' prefixes (device tier), then sessions round-robin until full
    for host in hosts:
        for tenant in host.tenants:
            publisher.stored(host.key, prefixes[tenant], None, MEDIUM_GPU)
            host.held += len(prefixes[tenant])
            publisher.flush(fill, host.key)
    per_endpoint = blocks // endpoints
    media, media_weights = zip(*TIER_MEDIA, strict=True)
    full = 0
    while full < len(hosts):
        full = 0
        for host in hosts:
            room = per_endpoint - host.held
            if room <= 0:
                full += 1
                continue
            tenant = rng.choice(host.tenants)
            tail = [rng.getrandbits(64) for _ in range(min(room, rng.randint(*TAIL_BLOCKS)))]
            medium = rng.choices(media, media_weights)[0]
            publisher.stored(host.key, tail, prefixes[tenant][-1], medium)
            host.sessions.append(Session(tenant, tail, medium))
            host.held += len(tail)
            publisher.flush(fill, host.key)
    for host in hosts:
        publisher.flush(fill, host.key, force=True)
    fill_blocks = sum(host.held for host in hosts)
    # churn at full size: an endpoint evicts its oldest session's tail and stores a new one
    churn: list[tuple[str, list[bytes]]] = []
    moved = 0
    while moved < churn_blocks:
        host = rng.choice(hosts)
        old = host.sessions.popleft()
        publisher.removed(host.key, old.tail, old.medium)
        tenant = rng.choice(host.tenants)
        tail = [rng.getrandbits(64) for _ in range(rng.randint(*TAIL_BLOCKS))]
        publisher.stored(host.key, tail, prefixes[tenant][-1], old.medium)
        host.sessions.append(Session(tenant, tail, old.medium))
        moved += len(old.tail) + len(tail)
        publisher.flush(churn, host.key)
    for host in hosts:
        publisher.flush(churn, host.key, force=True)
    distinct = len({b for prefix in prefixes for b in prefix}) + sum(
        len(s.tail) for host in hosts for s in host.sessions
    )
    return Population(prefixes, weights, hosts, fill, churn, fill_blocks, moved, distinct)


# ---- intake and memory --------------------------------------------------------------------------------------


@dataclass
class Intake:
    phase: str
    blocks: int
    batches: int
    cpu_s: float
    wall_s: float

    @property
    def blocks_per_cpu_s(self) -> float:
        return self.blocks / self.cpu_s


def feed(index: KvIndex, messages: list[tuple[str, list[bytes]]]) -> None:
    """What the subscriber does with each message: decode it, apply it to the index."""
    for key, frames in messages:
        batch = decode_message(frames)
        if batch is not None:
            index.apply(key, batch)


def timed_feed(index: KvIndex, messages: list[tuple[str, list[bytes]]], phase: str, blocks: int) -> Intake:
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    feed(index, messages)
    return Intake(phase, blocks, len(messages), time.process_time() - cpu, time.perf_counter() - wall)


def index_memory(population: Population) -> int:
    """Bytes tracemalloc sees allocated by a fill of an empty index (the decoded batches are freed as it goes)."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    index = KvIndex(BLOCK)
    feed(index, population.fill)
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    del index
    return used


# ---- picks --------------------------------------------------------------------------------------------------


@dataclass
class Picks:
    policy: str
    wall_us: list[float]  # the pick, wall clock
    pick_us: list[float]  # the pick, this thread's CPU time
    total_us: list[float]  # the pick, the allocation of its leg and the release of another (CPU time)
    locate_us: list[float]  # the index walk alone, part of the pick (CPU time)


def percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * q))]


def make_demands(population: Population, count: int, seed: int) -> Iterator[tuple[str, list[int]]]:
    """(kind, block hashes of the prompt) for `count` prompts; a prompt's tokens are its blocks × 16 + a partial
    block of 7."""
    rng = random.Random(seed)
    tenants = range(len(population.prefixes))
    for _ in range(count):
        roll = rng.random()
        if roll < 0.45:
            host = rng.choice(population.endpoints)
            session = rng.choice(host.sessions)
            hashes = population.prefixes[session.tenant] + session.tail
            kind = "follow-up"
        elif roll < 0.80:
            tenant = rng.choices(tenants, population.tenant_weights)[0]
            hashes = list(population.prefixes[tenant])
            kind = "new session"
        else:
            hashes = []
            kind = "cold"
        hashes = hashes + [rng.getrandbits(64) for _ in range(rng.randint(2, 40))]
        yield kind, hashes


def demand_for(hashes: list[int]) -> Demand:
    """A prompt of `hashes` full blocks and 7 more tokens whose block hashes are known (the pick reads no token
    ids then)."""
    demand = Demand(prompt_tokens=len(hashes) * BLOCK + 7, max_new_tokens=128)
    demand.kv_hashes = hashes
    return demand


def warmup_picks(endpoints: int) -> int:
    return IN_FLIGHT_PER_ENDPOINT * endpoints + WARMUP_PICKS


def measure_picks(policy: str, index: KvIndex, endpoints: int, prompts: list[list[int]], count: int) -> Picks:
    """Warm-up picks first (IN_FLIGHT_PER_ENDPOINT legs in flight on every endpoint on average, placed by the
    policy itself), then `count` timed picks, each leg released when IN_FLIGHT_PER_ENDPOINT × endpoints newer
    legs are in flight."""
    locator = KvLocatorFromIndex(index, BlockHasher(BLOCK))
    scheduler = Scheduler(policy, kv_locator=locator)  # type: ignore[arg-type]
    targets = make_targets(endpoints)
    scheduler.set_targets(targets)
    in_flight = IN_FLIGHT_PER_ENDPOINT * endpoints
    warmup = warmup_picks(endpoints)
    window: deque = deque()
    for hashes in prompts[:warmup]:
        demand = demand_for(hashes)
        target = scheduler.pick(ROLE, demand)
        window.append(scheduler.allocate(target, demand.prefill_tokens, demand.prompt_tokens))
        if len(window) > in_flight:
            window.popleft().release()
    wall_ns = [0] * count
    pick_ns = [0] * count
    total_ns = [0] * count
    wall, cpu = time.perf_counter_ns, time.thread_time_ns
    gc.collect()
    for i, hashes in enumerate(prompts[warmup:]):
        demand = demand_for(hashes)
        started, started_cpu = wall(), cpu()
        target = scheduler.pick(ROLE, demand)
        picked_cpu, picked = cpu(), wall()
        window.append(scheduler.allocate(target, demand.prefill_tokens, demand.prompt_tokens))
        window.popleft().release()
        done_cpu = cpu()
        wall_ns[i] = picked - started
        pick_ns[i] = picked_cpu - started_cpu
        total_ns[i] = done_cpu - started_cpu
    locate_ns = [0] * count
    if policy == "kv_cache_affinity":
        for i, hashes in enumerate(prompts[warmup:]):
            demand = demand_for(hashes)
            started_cpu = cpu()
            locator.locate(demand)
            locate_ns[i] = cpu() - started_cpu
    for allocation in window:
        allocation.release()
    return Picks(
        policy,
        sorted(ns / 1000 for ns in wall_ns),
        sorted(ns / 1000 for ns in pick_ns),
        sorted(ns / 1000 for ns in total_ns),
        sorted(ns / 1000 for ns in locate_ns),
    )


# ---- preparation: tokenizing and hashing ---------------------------------------------------------------------


@dataclass
class Preparation:
    what: str
    tokens: int
    us_per_1k: float


WORDS = ("the", "model", "token", "prompt", "cache", "decode", "prefill", "engine", "request", "stream", "of")


def words(rng: random.Random, count: int) -> str:
    return " ".join(
        rng.choice(WORDS) if rng.random() < 0.7 else str(rng.randint(0, 9999)) for _ in range(count)
    )


def bodies(tokenizer: PromptTokenizer, target: int, rng: random.Random) -> dict[Api, dict]:
    """A completions body and a chat body (system + user message) of about `target` prompt tokens."""
    text = words(rng, target)
    while len(tokenizer.prompt_ids({"prompt": text}, "completions") or []) < target:
        text += " " + words(rng, max(16, target // 8))
    half = len(text) // 2
    chat = {
        "messages": [{"role": "system", "content": text[:half]}, {"role": "user", "content": text[half:]}]
    }
    return {"completions": {"prompt": text}, "chat": chat}


def median_us(run: Callable[[], object]) -> float:
    """The median of PREPARE_REPEATS runs, µs of this thread's CPU time."""
    samples = []
    for _ in range(PREPARE_REPEATS):
        started = time.thread_time_ns()
        run()
        samples.append((time.thread_time_ns() - started) / 1000)
    return statistics.median(samples)


def measure_preparation(model_dir: Path | None, seed: int) -> list[Preparation]:
    rng = random.Random(seed)
    results: list[Preparation] = []
    tokenizers: list[tuple[str, PromptTokenizer]] = [("sim vocabulary", SimPromptTokenizer())]
    if model_dir is not None:
        tiny = HfPromptTokenizer(str(model_dir))
        tokenizers.insert(0, ("tiny model's HF tokenizer (byte-level BPE, 512 tokens)", tiny))
    for name, tokenizer in tokenizers:
        for target in PREPARE_TOKENS:
            for api, body in bodies(tokenizer, target, rng).items():
                ids = tokenizer.prompt_ids(body, api)
                assert ids, (name, api)
                us = median_us(partial(tokenizer.prompt_ids, body, api))
                results.append(Preparation(f"tokenize, {api}: {name}", len(ids), us * 1000 / len(ids)))
    for algorithm in ("sha256", "sha256_cbor"):
        hasher = BlockHasher(BLOCK, algorithm)
        for target in PREPARE_TOKENS:
            ids = [rng.randrange(VOCAB) for _ in range(target)]
            us = median_us(partial(hasher.event_hashes, ids))
            results.append(
                Preparation(f"block hashes, {algorithm}, block {BLOCK}", target, us * 1000 / target)
            )
    return results


def build_tiny_model(directory: Path) -> Path | None:
    """`motor model tiny` into `directory` (None, with a note, when the vllm extra's libraries are missing)."""
    out = directory / "tiny"
    built = subprocess.run(
        [sys.executable, "-m", "motor.cli.main", "model", "tiny", str(out)],
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    if built.returncode != 0:
        print(f"note: motor model tiny failed, HF tokenizer rows skipped: {built.stderr.strip()[-300:]}")
        return None
    return out


# ---- output -------------------------------------------------------------------------------------------------


def spread(values: list[float]) -> str:
    return f"{percentile(values, 0.5):.1f} / {percentile(values, 0.99):.1f} / {values[-1]:.0f}"


def print_picks(results: list[Picks]) -> None:
    columns = ("pick, wall clock", "pick, CPU time", "+ alloc/release, CPU", "of it index walk, CPU")
    print("\n" + " | ".join([f"{'P50 / P99 / max µs':<18}", *(f"{c:>22}" for c in columns)]))
    for r in results:
        walk = spread(r.locate_us) if any(r.locate_us) else "–"
        cells = (spread(r.wall_us), spread(r.pick_us), spread(r.total_us), walk)
        print(" | ".join([f"{r.policy:<18}", *(f"{c:>22}" for c in cells)]))


def print_intake(rows: list[Intake]) -> None:
    print(
        f"\n{'intake phase':<28} | {'blocks':>9} | {'batches':>8} | {'CPU s':>6} | {'blocks per CPU s':>16}"
    )
    for row in rows:
        print(
            f"{row.phase:<28} | {row.blocks:>9,} | {row.batches:>8,} | {row.cpu_s:>6.2f} | "
            f"{row.blocks_per_cpu_s:>16,.0f}"
        )


def print_preparation(rows: list[Preparation]) -> None:
    print(f"\n{'preparation':<62} | {'tokens':>6} | {'µs per 1,000 tokens':>19}")
    for row in rows:
        print(f"{row.what:<62} | {row.tokens:>6,} | {row.us_per_1k:>19,.0f}")


@skipped_without_matplotlib
def plot(
    picks: list[Picks], intake: list[Intake], preparation: list[Preparation], path: Path, title: str
) -> None:
    fig, axes = figure(1, 3, width=5.0, height=4.2)
    ax = axes[0][0]
    for r in picks:
        ys = [i / len(r.pick_us) for i in range(len(r.pick_us))]
        (line,) = ax.plot(r.pick_us, ys, label=f"{r.policy}, CPU time")
        ax.plot(r.wall_us, ys, linestyle="--", color=line.get_color(), label=f"{r.policy}, wall clock")
    ax.axvline(50, color="grey", linestyle=":", label="goal: P99 ≤ 50 µs")
    ax.set_xscale("log")
    ax.set_xlabel("µs per pick")
    ax.set_ylabel("fraction of picks")
    ax.set_title("picks over 1,000 endpoints (CDF)", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    ax = axes[0][1]
    ax.bar([row.phase for row in intake], [row.blocks_per_cpu_s / 1000 for row in intake])
    ax.axhline(100, color="grey", linestyle=":", label="goal: 100k blocks/s")
    ax.set_ylabel("thousand blocks per CPU second")
    ax.set_title("KV event intake (decode + apply)", fontsize=9)
    ax.tick_params(axis="x", labelsize=7)
    ax.legend(fontsize=7)
    ax = axes[0][2]
    longest: dict[str, Preparation] = {}
    for row in preparation:  # each kind's longest prompt
        if row.what not in longest or row.tokens > longest[row.what].tokens:
            longest[row.what] = row
    rows = list(longest.values())
    ax.barh([row.what.replace(": ", "\n") for row in rows], [row.us_per_1k for row in rows])
    ax.set_xlabel("µs per 1,000 tokens (the longer prompt of each kind)")
    ax.set_title("prompt preparation", fontsize=9)
    ax.tick_params(axis="y", labelsize=6)
    fig.suptitle(title, fontsize=9)
    save(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--endpoints", type=int, default=1000)
    parser.add_argument("--blocks", type=int, default=1_000_000, help="(instance, block) entries indexed")
    parser.add_argument("--tenants", type=int, default=250)
    parser.add_argument("--churn", type=int, default=200_000, help="blocks removed + stored at full size")
    parser.add_argument("--picks", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-tokenizer", action="store_true", help="skip the HF tokenizer rows")
    parser.add_argument("--plot", type=Path, default=default_plot_path("kv_routing_cost"))
    args = parser.parse_args()
    load_before = os.getloadavg()[0]

    started = time.perf_counter()
    population = populate(args.endpoints, args.blocks, args.tenants, args.churn, args.seed)
    print(
        f"{args.endpoints} endpoints, {population.fill_blocks:,} (instance, block) entries over "
        f"{population.distinct_blocks:,} distinct blocks, {args.tenants} tenants; "
        f"{len(population.fill):,} fill batches, {len(population.churn):,} churn batches "
        f"(generated in {time.perf_counter() - started:.0f} s)"
    )
    prompts = list(make_demands(population, warmup_picks(args.endpoints) + args.picks, args.seed))
    kinds: dict[str, int] = {}
    for kind, _ in prompts[-args.picks :]:
        kinds[kind] = kinds.get(kind, 0) + 1
    # The workload's own million hashes, frames and prompts stay out of the collector's passes (a coordinator
    # has none of them); the index and everything the picks allocate are collected as in a coordinator.
    gc.collect()
    gc.freeze()
    index = KvIndex(BLOCK)
    intake = [
        timed_feed(index, population.fill, "fill (BlockStored)", population.fill_blocks),
        timed_feed(index, population.churn, "churn (BlockRemoved + Stored)", population.churn_blocks),
    ]
    held = sum(index.block_count(tier) for tier in ("device", "cpu", "disk"))
    stats = index.stats
    assert stats.gaps == stats.wrong_block_size == stats.unknown_medium == 0, stats
    picks = [
        measure_picks(policy, index, args.endpoints, [hashes for _, hashes in prompts], args.picks)
        for policy in ("kv_cache_affinity", "load_balance")
    ]
    memory = index_memory(population)
    with tempfile.TemporaryDirectory() as scratch:
        model_dir = None if args.no_tokenizer else build_tiny_model(Path(scratch))
        preparation = measure_preparation(model_dir, args.seed)
    load_after = os.getloadavg()[0]

    print(
        f"load average {load_before:.2f} → {load_after:.2f} on {os.cpu_count()} CPUs; "
        f"timed prompts: {kinds}; distinct (tier, block) keys after churn: {held:,}"
    )
    print_picks(picks)
    print_intake(intake)
    print(
        f"\nindex memory (tracemalloc, Python allocations): {memory / 2**20:,.0f} MiB for "
        f"{population.fill_blocks:,} entries = {memory / population.fill_blocks * 1e6 / 2**20:,.0f} MiB per "
        f"million entries ({memory / population.fill_blocks:.0f} bytes per entry)"
    )
    print_preparation(preparation)
    plot(
        picks,
        intake,
        preparation,
        args.plot,
        f"kv_cache_affinity decision cost: {args.endpoints} endpoints, {population.fill_blocks:,} blocks "
        f"indexed, load avg {load_before:.1f}",
    )


if __name__ == "__main__":
    main()
