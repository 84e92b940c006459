"""kv_cache_affinity on vLLM CPU: how close what the coordinator expects a prefill engine to find cached comes to the
`cached_tokens` the engine reports, request by request.

Deploys tests/fixtures/kv_prediction.py's copy of examples/local (2 prefill engines with prefix caching on and a
KV cache of `--cache-blocks` blocks of 32 tokens each, 1 decode engine, the KV pool on, the coordinator at DEBUG)
with `motor deploy`, builds `motor model tiny` for it, and sends, one at a time: `--tenants` tenants' requests
(a shared prefix each, completions and chat, `--turns` turns of growing conversations) `--passes` times over, then
`--fillers` distinct long prompts that push the caches past capacity, then the tenants' requests once more (the
engines evicted and the pool may still hold). Per request it pairs the coordinator's DEBUG line for the prefill leg
(what it expected: its own-cache and pool blocks) with the response's usage.prompt_tokens_details.cached_tokens.

    .venv/bin/python benchmarks/kv_prediction_vllm.py [--tenants 6] [--turns 3] [--passes 2] [--fillers 16]
        [--cache-blocks 64]
"""

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fixtures.kv_prediction import (
    BLOCK,
    Deployment,
    Expected,
    index_blocks,
    kv_routed_example,
    tenant_requests,
    words,
)
from tests.fixtures.local_example import build_tiny_model, deployed

JOB_ID = "motor-kv-bench"


@dataclass
class Phase:
    name: str
    pairs: list[tuple[int, Expected]] = field(default_factory=list)

    def count(self, within: int) -> int:
        return sum(abs(expected.tokens - cached) <= within for cached, expected in self.pairs)

    def row(self) -> str:
        n = len(self.pairs)
        exact, close = self.count(0), self.count(BLOCK)
        over = sum(expected.tokens - cached > BLOCK for cached, expected in self.pairs)
        under = n - close - over
        own = sum(expected.own_blocks for _, expected in self.pairs) * BLOCK
        pool = sum(expected.pool_blocks for _, expected in self.pairs) * BLOCK
        cached = sum(cached for cached, _ in self.pairs)
        expected_tokens = sum(expected.tokens for _, expected in self.pairs)
        return (
            f"{self.name:<32} | {n:>4} | {exact:>4} ({exact / n:4.0%}) | {close:>4} ({close / n:4.0%}) | "
            f"{over:>4} | {under:>5} | {expected_tokens:>8,} ({own:,} own, {pool:,} pool) | {cached:>8,}"
        )


def run(deploy: Deployment, args: argparse.Namespace) -> list[Phase]:
    tenants = tenant_requests(args.tenants, args.turns)
    phases = [Phase("tenants, first pass"), Phase("tenants, repeated"), Phase("fillers (evicting)")]
    phases.append(Phase("tenants after the fillers"))
    for api, body in tenants:
        phases[0].pairs.append(deploy.send(api, body))
    for _ in range(args.passes - 1):
        for api, body in tenants:
            phases[1].pairs.append(deploy.send(api, body))
    for n in range(args.fillers):
        phases[2].pairs.append(deploy.send("completions", {"prompt": f"filler {n} " + words(3000 + n, 150)}))
    for api, body in tenants:
        phases[3].pairs.append(deploy.send(api, body))
    return phases


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tenants", type=int, default=6)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--fillers", type=int, default=16)
    parser.add_argument("--cache-blocks", type=int, default=64)
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kv-prediction-") as scratch:
        root = Path(scratch)
        log_path = root / "motor-cli.log"
        build_tiny_model(root, ".motor/models/tiny", log_path)
        config_dir, deploy = kv_routed_example(root, JOB_ID, args.cache_blocks)
        with deployed(root, config_dir, deploy.run_root, JOB_ID, log_path):
            phases = run(deploy, args)
            held = index_blocks(deploy.metrics())
    load_after = os.getloadavg()[0]
    print(
        f"2 prefill + 1 decode vLLM CPU engines, KV cache {args.cache_blocks} blocks of {BLOCK} tokens per prefill, "
        f"pool on; {time.monotonic() - started:.0f} s; load average {load_before:.2f} → {load_after:.2f} on "
        f"{os.cpu_count()} CPUs"
    )
    print(
        f"\n{'phase':<32} | {'legs':>4} | {'exact':>11} | {'≤ 1 block':>11} | {'over':>4} | {'under':>5} | "
        f"{'expected tokens':>30} | {'cached':>8}"
    )
    for phase in phases:
        print(phase.row())
    everything = Phase("all", [pair for phase in phases for pair in phase.pairs])
    print(everything.row())
    print(f"\nthe index's own-cache blocks per prefill engine at the end: {held}")


if __name__ == "__main__":
    main()
