"""A stream's replay after its decode engine dies: resumed through the KV pool against a cold re-prefill.

Two sim clusters side by side, each a coordinator (prefill_first, reschedule_config on) in front of 1 prefill and
2 decode engines; the prefill engine runs without its own prefix cache, so only the pool can spare it the prompt:

- `pool`: a real mooncake_master; the prefill writes the prompt's blocks, the replay's prefill reads them back;
- `cold`: no pool; the replay's prefill computes the prompt again.

Turn by turn (pool, cold, pool, ...), one streamed completion per turn (a fresh prompt of --prompt-tokens, greedy
decoding) whose decode engine is SIGKILLed after --kill-after tokens; the killed engine is replaced by a fresh
one before the next turn. Per turn it records the resume gap the client sees (the last token event before the
kill → the first after it) and the prompt tokens the prefill engine computed for the replay
(`vllm:prompt_tokens_by_source_total{source="local_compute"}`), and checks the text against the unbroken answer.
It prints P50/P99 per setup and writes a plot.

    .venv/bin/python benchmarks/replay_resume.py [--turns 6] [--prompt-tokens 1024] [--kill-after 12]
"""

import argparse
import asyncio
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.plotting import default_plot_path, figure, skipped_without_matplotlib
from motor.kv.pool import KvCachePoolConfig
from motor.pool.master import MooncakeMaster
from motor.runtime.net import free_local_ports
from tests.fixtures.coordinator import CoordinatorProcess, engine_metric, sim_instance, start_coordinator
from tests.fixtures.sim import SimEngine, start_sim_engine

COMPUTED = 'vllm:prompt_tokens_by_source_total{source="local_compute"}'
MAX_TOKENS = 48
ENGINE_ARGS = ["--prefill-ms-per-token", "1", "--itl-ms", "20", "--kv-wait-timeout-s", "10"]
REPLAY = {
    "exception_config": {
        "max_retry": 3,
        "retry_delay": 0.05,
        "first_token_timeout": 10,
        "infer_timeout": 60,
        "reschedule_config": {"enable": True},
    },
    "timeout_config": {"request_timeout": 10, "read_timeout": 5, "connection_timeout": 1},
    # a killed engine's connection failures must not open its successor's circuit before the next turn
    "circuit_config": {"enable": False},
}


@dataclass
class Setup:
    name: str
    work: Path
    store: dict[str, Any] | None
    prefill: SimEngine | None = None
    decodes: list[SimEngine] = field(default_factory=list)
    coordinator: CoordinatorProcess | None = None
    gaps: list[float] = field(default_factory=list)
    computed: list[float] = field(default_factory=list)
    generation: int = 0

    def engine(self, role: str) -> SimEngine:
        self.generation += 1
        kv_role = "kv_producer" if role == "prefill" else "kv_consumer"
        extra = [*ENGINE_ARGS, "--no-enable-prefix-caching"] if role == "prefill" else ENGINE_ARGS
        store = self.store
        if store is not None and role == "decode":
            store = {
                **store,
                "global_segment_size": 0,
            }  # a killed decode leaves no segment behind in the master
        return start_sim_engine(
            self.work / "engines",
            kv_role=kv_role,
            engine_id=f"{self.name}-{role}-{self.generation}",
            store_config=store,
            extra_args=extra,
        )

    def register(self) -> None:
        assert self.coordinator is not None and self.prefill is not None
        instances = [sim_instance(self.prefill, "prefill")] + [
            sim_instance(d, "decode") for d in self.decodes
        ]
        self.coordinator.register(instances)

    def streaming_decode(self) -> SimEngine | None:
        for decode in self.decodes:
            if decode.exit_code() is None and engine_metric(decode, "vllm:num_requests_running"):
                return decode
        return None

    def stop(self) -> None:
        for child in [self.coordinator, self.prefill, *self.decodes]:
            if child is not None:
                child.stop()


def prompt(turn: int, tokens: int) -> str:
    return " ".join(f"t{turn}w{i}" for i in range(tokens))


async def one_turn(setup: Setup, text: str, kill_after: int) -> None:
    assert setup.coordinator is not None and setup.prefill is not None
    body = {
        "model": "sim-model",
        "prompt": text,
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "ignore_eos": True,
    }
    times: list[float] = []
    killed_at: float | None = None
    killed: SimEngine | None = None
    events: list[dict[str, Any]] = []
    computed_before = 0.0
    async with (
        httpx.AsyncClient(base_url=setup.coordinator.base_url, timeout=60) as http,
        http.stream("POST", "/v1/completions", json=body | {"stream": True}) as response,
    ):
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            times.append(time.perf_counter())
            events.append(json.loads(line[6:]))
            if killed is None and len(times) >= kill_after:
                killed = await asyncio.to_thread(setup.streaming_decode)
                assert killed is not None, "no decode engine was streaming"
                computed_before = engine_metric(setup.prefill, COMPUTED)
                killed.process.kill()
                killed_at = time.perf_counter()
    assert killed is not None and killed_at is not None, "the stream ended before the kill"
    assert not [e for e in events if "error" in e], events[-1]
    before = [t for t in times if t <= killed_at]
    after = [t for t in times if t > killed_at]
    setup.gaps.append(after[0] - before[-1])
    setup.computed.append(engine_metric(setup.prefill, COMPUTED) - computed_before)
    reference = httpx.post(f"{setup.coordinator.base_url}/v1/completions", json=body, timeout=60).json()
    resumed = "".join(e["choices"][0].get("text", "") for e in events if e.get("choices"))
    if resumed != reference["choices"][0]["text"]:
        raise AssertionError(f"{setup.name}: the resumed text differs from the unbroken answer")
    killed.wait_exit(timeout_s=10)
    setup.decodes = [d for d in setup.decodes if d is not killed] + [setup.engine("decode")]
    setup.register()


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@skipped_without_matplotlib
def plot(setups: list[Setup], path: Path) -> None:
    fig, axes = figure(1, 2, width=10.0)
    for setup in setups:
        axes[0].plot([g * 1000 for g in setup.gaps], marker="o", label=setup.name)
        axes[1].plot(setup.computed, marker="o", label=setup.name)
    axes[0].set(title="resume gap", xlabel="turn", ylabel="ms")
    axes[1].set(title="prompt tokens the replay's prefill computed", xlabel="turn", ylabel="tokens")
    for ax in axes:
        ax.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    print(f"plot: {path}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=6, help="kills per setup")
    parser.add_argument("--prompt-tokens", type=int, default=1024)
    parser.add_argument("--kill-after", type=int, default=12, help="token events before the kill")
    parser.add_argument("--plot", type=Path, default=default_plot_path("replay_resume"))
    args = parser.parse_args()
    started = datetime.datetime.now().astimezone()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="motor-replay-") as tmp, ExitStack() as stack:
        work = Path(tmp)
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
        stack.callback(master.stop)
        setups = [Setup("pool", work / "pool", master.store_config()), Setup("cold", work / "cold", None)]
        for setup in setups:
            stack.callback(setup.stop)
            setup.prefill = setup.engine("prefill")
            setup.decodes = [setup.engine("decode"), setup.engine("decode")]
            setup.coordinator = start_coordinator(
                setup.work / "coordinator", profile="prefill_first", coordinator_config=REPLAY
            )
            setup.register()
        for turn in range(args.turns):
            for setup in setups:  # turn by turn: the same prompt length and load, paths alternated
                asyncio.run(
                    one_turn(
                        setup, prompt(turn * 2 + setups.index(setup), args.prompt_tokens), args.kill_after
                    )
                )
    header = (
        f"replay_resume {started:%Y-%m-%d %H:%M %Z}: {args.turns} kills per setup, {args.prompt_tokens}-token "
        f"prompts, killed after {args.kill_after} tokens of {MAX_TOKENS}; sim prefill 1 ms/token, ITL 20 ms; "
        f"{os.cpu_count()} cores, load average {load_before:.1f} before / {os.getloadavg()[0]:.1f} after"
    )
    print(header)
    print(
        f"{'setup':<6} {'gap P50':>9} {'gap P99':>9} {'computed per resume (mean)':>28} {'min':>6} {'max':>6}"
    )
    for setup in setups:
        print(
            f"{setup.name:<6} {quantile(setup.gaps, 0.5) * 1000:>7.0f}ms {quantile(setup.gaps, 0.99) * 1000:>7.0f}ms "
            f"{statistics.mean(setup.computed):>28.0f} {min(setup.computed):>6.0f} {max(setup.computed):>6.0f}"
        )
    plot(setups, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
