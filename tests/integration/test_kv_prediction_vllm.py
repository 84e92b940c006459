"""kv_cache_affinity on vLLM CPU engines: what the coordinator's index expected each chosen prefill engine to find
cached, against the `cached_tokens` the engine reported (tests/fixtures/kv_prediction.py: a copy of examples/local
with 2 prefill engines, prefix caching on, a KV cache of EVICTING_BLOCKS blocks each, 1 decode engine, the KV pool
on, deployed by `motor deploy`).

- Tenants' prompts (completions and chat, shared prefixes, repeats) sent one at a time: at least 95 % of the prefill
  legs find within one KV block of what the coordinator expected, and its metrics count the same.
- Then distinct prompts fill both engines' caches past capacity: the index holds no more blocks of an engine than
  its cache has (the engines' BlockRemoved events applied), and the first prompt, sent again, is not expected in
  any engine's own cache any more (the pool may still hold it: what the engine then loads from there, the
  coordinator expected too).

The module starts 3 vLLM engines once (about 9 GB, 60-90 s on 2 cores).
"""

import re
from collections.abc import Iterator

import pytest

from tests.fixtures.coordinator import metric_at
from tests.fixtures.kv_prediction import (
    BLOCK,
    Deployment,
    index_blocks,
    kv_routed_example,
    tenant_requests,
    words,
)
from tests.fixtures.local_example import build_tiny_model, deployed
from tests.installs import needs_vllm

pytestmark = [pytest.mark.slow, needs_vllm]

MODEL_DIR = ".motor/models/tiny"
JOB_ID = "motor-kv-vllm"
EVICTING_BLOCKS = 48  # each prefill engine's KV cache: 1,536 tokens


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    root = tmp_path_factory.mktemp("kv-vllm")
    log_path = root / "motor-cli.log"
    build_tiny_model(root, MODEL_DIR, log_path)
    config_dir, deploy = kv_routed_example(root, JOB_ID, EVICTING_BLOCKS)
    with deployed(root, config_dir, deploy.run_root, JOB_ID, log_path):
        yield deploy


def test_the_coordinator_expects_what_the_prefill_engines_find_cached(deployment: Deployment) -> None:
    pairs = [deployment.send(api, body) for api, body in tenant_requests(tenants=4, turns=3) * 2]
    assert all(expected.reported == cached for cached, expected in pairs), pairs
    close = [abs(expected.tokens - cached) <= BLOCK for cached, expected in pairs]
    assert sum(close) >= 0.95 * len(pairs), pairs
    assert sum(cached for cached, _ in pairs) >= 20 * BLOCK, "repeats found their prefixes cached"
    counted = {
        outcome: metric_at(
            deployment.mgmt_url, f'motor_coordinator_kv_predictions_total{{outcome="{outcome}"}}'
        )
        for outcome in ("exact", "within_block", "over", "under")
    }
    assert counted["exact"] + counted["within_block"] == sum(close), counted


def test_what_an_engine_evicted_is_forgotten(deployment: Deployment) -> None:
    first = ("completions", {"prompt": "first " + words(1000, 150)})
    _, placed = deployment.send(*first)
    for n in range(14):  # ~10 blocks each: 140 blocks for 2 × 48
        deployment.send("completions", {"prompt": f"filler {n} " + words(2000 + n, 150)})
    text = deployment.metrics()
    held = index_blocks(text)
    assert held and all(0 < blocks <= EVICTING_BLOCKS for blocks in held.values()), held
    applied = re.findall(
        r'motor_coordinator_kv_events_total\{instance="[^"]+",outcome="applied"\} (\S+)', text
    )
    assert sum(float(value) for value in applied) > 0

    cached, again = deployment.send(*first)
    assert placed.own_blocks == 0 and again.own_blocks == 0, (placed, again)
    assert abs(again.tokens - cached) <= BLOCK, (again, cached)
