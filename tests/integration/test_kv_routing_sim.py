"""kv_cache_affinity end to end on a local sim cluster: engines publish KV events, every coordinator worker
indexes them, repeats of a prompt go where its KV is, whichever worker takes them.

The scenario of issue 22: 3 aggregated instances whose prefix caches each hold about half of the working set,
12 long prompts sent 4 times each on fresh connections to a coordinator with 3 workers.
"""

import json
import os
import re
import signal
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from motor.cli import local_job
from tests.fixtures.control import ConfigPair, LocalRun, as_union, merge, sim_config
from tests.fixtures.coordinator import metric_at

pytestmark = pytest.mark.slow

BLOCK_SIZE = 16
PROMPTS = 12
ROUNDS = 4
PROMPT_WORDS = 511  # with the tenant's two words: 513 tokens, 32 full blocks
# 12 × 32 blocks of prompt are the working set; each instance holds half of it
BLOCKS_PER_INSTANCE = PROMPTS * 32 // 2


def union_cluster(directory: Path, scheduler_type: str) -> LocalRun:
    config = sim_config(directory, pool=False)
    user = merge(
        config.doc,
        {
            "motor_coordinator_config": {
                "scheduler_config": {"scheduler_type": scheduler_type},
                "inference_workers_config": {"num_workers": 3},
            }
        },
    )
    engine = {
        "engine_type": "sim",
        "engine_config": {
            "served_model_name": "sim-model",
            "max_model_len": 4096,
            "block_size": BLOCK_SIZE,
            "max_num_seqs": 16,
            "num_gpu_blocks_override": BLOCKS_PER_INSTANCE,
        },
    }
    user = as_union(user, 3, engine)
    user["motor_deploy_config"]["job_id"] = f"kv-{scheduler_type}".replace("_", "-")
    config.user.write_text(json.dumps(user, indent=2))
    config = ConfigPair(config.directory, config.user, config.env, user)
    return LocalRun(config, directory / "run", user["motor_deploy_config"]["job_id"])


def prompt(tenant: int) -> str:
    words = " ".join(f"w{(tenant * 7919 + k) % 5003}" for k in range(PROMPT_WORDS))
    return f"tenant {tenant} {words}"


def cached_repeats(run: LocalRun) -> tuple[int, list[int]]:
    """Repeats (rounds 2..4) whose whole prompt but the last block came from the instance's cache, and the
    cached token counts of every repeat."""
    cached: list[int] = []
    for round_number in range(ROUNDS):
        for tenant in range(PROMPTS):
            # a fresh connection each time, so the coordinator's workers share the requests
            with httpx.Client(base_url=run.api_url, timeout=30) as client:
                response = client.post(
                    "/v1/completions",
                    json={"model": "sim-model", "prompt": prompt(tenant), "max_tokens": 2},
                )
            assert response.status_code == 200, response.text
            usage: dict[str, Any] = response.json()["usage"]
            if round_number:
                cached.append(usage["prompt_tokens_details"]["cached_tokens"])
    full = (PROMPT_WORDS + 2) // BLOCK_SIZE * BLOCK_SIZE
    return sum(tokens >= full - BLOCK_SIZE for tokens in cached), cached


@pytest.fixture
def clusters(tmp_path: Path) -> Iterator[Callable[[str], LocalRun]]:
    runs: list[LocalRun] = []

    def make(scheduler_type: str) -> LocalRun:
        run = union_cluster(tmp_path / scheduler_type, scheduler_type)
        runs.append(run)
        assert run.plan_and_deploy() == 0
        return run

    yield make
    for run in runs:
        local_job.stop(run.run_root, run.job_id)


def engine_pid(run: LocalRun, instance: str) -> int:
    """`instance`'s sim engine: the child of the engine server its node manager recorded, checked by its command
    line so the kill cannot hit another process."""
    wrapper = json.loads((run.run_dir / instance / "engine.pid").read_text())["pid"]
    (engine,) = Path(f"/proc/{wrapper}/task/{wrapper}/children").read_text().split()
    argv = Path(f"/proc/{engine}/cmdline").read_bytes().decode().split("\0")
    assert "motor.engine.sim" in argv, argv
    return int(engine)


def feeds(run: LocalRun) -> dict[str, str]:
    """Each publishing instance's subscription state, as the coordinator's workers report it."""
    with urllib.request.urlopen(f"{run.mgmt_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    found = re.findall(r'motor_coordinator_kv_event_feed\{instance="([^"]+)",state="([a-z]+)"\} 1\.0', text)
    return dict(found)


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_every_repeat_hits_with_three_workers_where_text_affinity_and_load_balance_miss(
    clusters: Callable[[str], LocalRun],
) -> None:
    kv_routed = clusters("kv_cache_affinity")
    hits, cached = cached_repeats(kv_routed)
    assert hits == PROMPTS * (ROUNDS - 1), f"{hits} of {len(cached)} repeats hit; cached tokens {cached}"

    # the intake shows in the metrics (summed over the 3 workers, each of which receives every batch)
    subscribed = feeds(kv_routed)
    assert sorted(subscribed.values()) == ["connected"] * 3, subscribed
    for key in subscribed:
        assert metric_at(
            kv_routed.mgmt_url, f'motor_coordinator_kv_events_total{{instance="{key}",outcome="applied"}}'
        )
        assert metric_at(
            kv_routed.mgmt_url, f'motor_coordinator_kv_index_blocks{{instance="{key}",tier="device"}}'
        )
    # an engine that dies is seen by every worker, and routing goes on
    victim = next(key for key in subscribed if key.startswith("union-1"))
    os.kill(engine_pid(kv_routed, "union-1"), signal.SIGKILL)
    disconnects = f'motor_coordinator_kv_event_disconnects_total{{instance="{victim}"}}'
    wait_for(lambda: metric_at(kv_routed.mgmt_url, disconnects) >= 3, "all three workers to see it go")
    with httpx.Client(base_url=kv_routed.api_url, timeout=30) as client:
        body = {"model": "sim-model", "prompt": prompt(0), "max_tokens": 2}
        assert client.post("/v1/completions", json=body).status_code == 200
    local_job.stop(kv_routed.run_root, kv_routed.job_id)

    # the same traffic without the index: each worker's private text LRU knows a third of it, and load alone
    # spreads the prompts over all three caches, which then evict each other (measured 2026-12-03: 26 and 5-19)
    for policy in ("prefix_affinity", "load_balance"):
        run = clusters(policy)
        baseline, cached = cached_repeats(run)
        assert baseline < hits, f"{policy}: {baseline} of {len(cached)} repeats hit; cached tokens {cached}"
        local_job.stop(run.run_root, run.job_id)


def test_the_pool_tier_predicts_what_the_prefill_engines_then_load_from_the_pool(
    local_run: Callable[..., LocalRun],
) -> None:
    # prefill engines without their own prefix cache publish nothing: only the pool can know a repeated prompt
    run = local_run(
        overrides={
            "motor_deploy_config": {"p_instances_num": 2},
            "motor_coordinator_config": {"scheduler_config": {"scheduler_type": "kv_cache_affinity"}},
            "motor_engine_prefill_config": {"engine_config": {"no_enable_prefix_caching": True}},
        }
    )
    assert run.plan_and_deploy() == 0
    answered = 'motor_coordinator_kv_pool_queries_total{answer="answered"}'
    ports = [c["ports"]["engine"] for c in run.state()["components"] if c["name"].startswith("prefill-")]

    def counts() -> tuple[float, float, float, float]:
        loaded = sum(
            metric_at(f"http://127.0.0.1:{port}", "vllm:external_prefix_cache_hits_total") for port in ports
        )
        return (
            metric_at(run.mgmt_url, answered),
            metric_at(run.mgmt_url, "motor_coordinator_kv_pool_blocks_total"),
            loaded,
            metric_at(run.mgmt_url, 'motor_coordinator_kv_predictions_total{outcome="exact"}'),
        )

    def complete(text: str) -> None:
        body = {"model": "sim-model", "prompt": text, "max_tokens": 2}
        response = httpx.post(f"{run.api_url}/v1/completions", json=body, timeout=30)
        assert response.status_code == 200, response.text

    # each worker connects its store client in the background: new prompts (nothing to load) until one is answered
    for tenant in range(100, 150):
        complete(prompt(tenant))
        if counts()[0]:
            break
    else:
        pytest.fail("the coordinator never got an answer from the pool")
    before = counts()
    complete(prompt(0))
    complete(prompt(0))
    queries, predicted, loaded, exact = (after - start for after, start in zip(counts(), before, strict=True))
    # the first request found nothing; the second, all the blocks the first prefill wrote (prompt[:-1])
    assert queries == 2
    assert predicted == (PROMPT_WORDS + 1) // BLOCK_SIZE
    assert loaded == predicted * BLOCK_SIZE
    assert exact == 2, "both prefill engines reported the cached tokens the coordinator expected of them"
