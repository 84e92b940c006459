"""Stalls cost seconds, not the request timeout (issue #13, part 2), with sim engines and a real Mooncake master:
once the coordinator has measured both prefill instances, one of them stops answering (the sim's `hang` fault).
Its prefill legs miss their own deadline (a second or two here, request_timeout is 30 s), are closed at the
engine (no orphan leg) and move to the other instance; the answers are the oracle's tokens, each once; the
second stall degrades the instance and it gets no more legs while the other can take them. When every prefill
instance stalls, the last attempt max_retry allows waits within the request's limits instead of failing."""

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.fixtures.coordinator import (
    CoordinatorProcess,
    StartCoordinator,
    coordinator_metric,
    engine_metric,
    set_engine_faults,
    sim_instance,
    sse_chunks,
    wait_engine_idle,
)
from tests.fixtures.pool import RunningPool
from tests.fixtures.processes import stopping_factory
from tests.fixtures.sim import (
    SimEngine,
    expected_tokens,
    fresh_prompt,
    start_ready_together,
    start_sim_engine,
)

REQUEST_TIMEOUT = 30.0
ABORTED = 'vllm:request_success_total{finished_reason="abort"}'
HANG_FIRED = 'motor_sim_faults_fired_total{fault="hang"}'
PREFILLED = 'vllm:request_success_total{finished_reason="length"}'  # a prefill leg is one token long
RETRIES = 'motor_coordinator_retries_total{role="prefill",reason="%s"}'
MIN_SAMPLES = 3
CONFIG = {
    "exception_config": {"max_retry": 3, "retry_delay": 0.05, "first_token_timeout": 60, "infer_timeout": 90},
    "timeout_config": {
        "request_timeout": REQUEST_TIMEOUT,
        "read_timeout": REQUEST_TIMEOUT,
        "prefill_deadline_floor": 1.0,
        "prefill_deadline_allowance": 0.5,
        "prefill_deadline_factor": 4.0,
        "prefill_deadline_min_samples": MIN_SAMPLES,
    },
    "scheduler_config": {
        "scheduler_type": "round_robin",
        "stall_degraded_after": 2,
        "stall_recovery_half_life": 600.0,
    },
}


@pytest.fixture(scope="module")
def engines(
    shared_mooncake_master: RunningPool, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[SimEngine]]:
    """prefill-0, prefill-1, decode-0."""
    store = shared_mooncake_master.store_config
    decode_args = ["--kv-wait-timeout-s", "10", "--itl-ms", "5"]
    with stopping_factory(start_sim_engine, tmp_path_factory.mktemp("prefill-deadline")) as start:
        yield start_ready_together(
            start,
            *(
                {"kv_role": "kv_producer", "store_config": store, "engine_id": f"prefill-{i}"}
                for i in range(2)
            ),
            {
                "kv_role": "kv_consumer",
                "store_config": store,
                "engine_id": "decode-0",
                "extra_args": decode_args,
            },
        )


@pytest.fixture
def cluster(engines: list[SimEngine]) -> Iterator[list[SimEngine]]:
    yield engines
    set_engine_faults(engines[0], hang=False)
    for engine in engines:
        wait_engine_idle(engine)


def body(stream: bool) -> dict[str, Any]:
    return {
        "model": "sim-model",
        "prompt": fresh_prompt(40),
        "max_tokens": 8,
        "seed": 3,
        "temperature": 1.0,
        "ignore_eos": True,
        "return_token_ids": True,
        "stream": stream,
    }


def assert_oracle_stream(response: httpx.Response) -> None:
    """The stream carries exactly the oracle's tokens, each once, and ends normally."""
    assert response.status_code == 200, response.text
    assert response.text.endswith("data: [DONE]\n\n") and '"error"' not in response.text
    chunks = sse_chunks(response.text)
    prompt_ids = next(
        c["choices"][0]["prompt_token_ids"] for c in chunks if c["choices"][0].get("prompt_token_ids")
    )
    tokens = [t for c in chunks if c["choices"] for t in c["choices"][0].get("token_ids") or []]
    assert tokens == expected_tokens(prompt_ids, max_tokens=8, seed=3, ignore_eos=True)


def endpoint_view(coordinator: CoordinatorProcess) -> dict[str, dict[str, Any]]:
    """/instances' endpoint_load by instance id."""
    status, view = coordinator.mgmt_get("/instances")
    assert status == 200
    return {key.split("@")[0]: load for key, load in view["endpoint_load"].items()}


def stalls(coordinator: CoordinatorProcess, instance: str) -> float:
    return coordinator_metric(coordinator, f'motor_coordinator_prefill_stalls_total{{instance="{instance}"}}')


@pytest.mark.parametrize("profile", ["prefill_first", "decode_first", "concurrent"])
async def test_a_stalled_prefill_moves_within_its_deadline_and_degrades(
    cluster: list[SimEngine], coordinators: StartCoordinator, profile: str
) -> None:
    hung, healthy, decode = cluster
    coordinator = coordinators(profile=profile, coordinator_config=CONFIG)
    coordinator.register(
        [sim_instance(hung, "prefill"), sim_instance(healthy, "prefill"), sim_instance(decode, "decode")]
    )
    async with httpx.AsyncClient(base_url=coordinator.base_url, timeout=120) as http:
        # measure both prefill instances first (round robin alternates them)
        for _ in range(2 * MIN_SAMPLES):
            response = await http.post("/v1/completions", json=body(stream=False))
            assert response.status_code == 200, response.text
        view = endpoint_view(coordinator)
        for instance in ("prefill-0", "prefill-1"):
            assert view[instance]["prefill_legs_measured"] >= MIN_SAMPLES, view
            assert view[instance]["prefill_tokens_per_second"] > 0

        set_engine_faults(hung, hang=True)
        held_before, aborts_before = engine_metric(hung, HANG_FIRED), engine_metric(hung, ABORTED)
        served = 0
        while stalls(coordinator, "prefill-0") < 2:
            assert served < 6, "prefill-0 was not picked twice in 6 requests"
            held, prefilled = engine_metric(hung, HANG_FIRED), engine_metric(healthy, PREFILLED)
            moved = coordinator_metric(coordinator, RETRIES % "prefill_stalled")
            response = await http.post("/v1/completions", json=body(stream=True))
            assert_oracle_stream(response)
            stalled = engine_metric(hung, HANG_FIRED) - held  # 1 when its first leg went to prefill-0
            # wherever its first leg went, prefill-1 computed the prompt: a stalled leg moved there ...
            assert engine_metric(healthy, PREFILLED) - prefilled == 1
            # ... on its own deadline (a prefill_stalled retry), not on request_timeout (a timeout retry) ...
            assert coordinator_metric(coordinator, RETRIES % "prefill_stalled") - moved == stalled
            assert coordinator_metric(coordinator, RETRIES % "timeout") == 0
            # ... and the decode leg was the retry's, under the retry's engine request id
            assert sse_chunks(response.text)[0]["id"].endswith("-retry1") == (stalled == 1), response.text
            served += 1
        wait_engine_idle(hung)  # every stalled leg was closed at the engine
        held = engine_metric(hung, HANG_FIRED) - held_before
        assert held == 2 and engine_metric(hung, ABORTED) - aborts_before == 2
        assert coordinator_metric(coordinator, RETRIES % "prefill_stalled") == 2

        # degraded: every leg goes to prefill-1 while it can take them
        view = endpoint_view(coordinator)
        assert view["prefill-0"]["degraded"] is True and view["prefill-0"]["prefill_stalls"] == 2, view
        assert view["prefill-1"]["degraded"] is False
        degraded = 'motor_coordinator_instance_degraded{instance="prefill-0",role="prefill"}'
        assert coordinator_metric(coordinator, degraded) == 1
        responses = await asyncio.gather(
            *(http.post("/v1/completions", json=body(stream=True)) for _ in range(4))
        )
        for response in responses:
            assert_oracle_stream(response)
        assert engine_metric(hung, HANG_FIRED) - held_before == 2, "a leg reached the degraded instance"
    for engine in cluster:
        wait_engine_idle(engine)


async def test_the_last_attempt_waits_out_a_stall_of_every_prefill_instance(
    cluster: list[SimEngine], coordinators: StartCoordinator
) -> None:
    """Both prefill instances stop answering for a while: the stalled legs move on their deadlines until
    max_retry is used up, and the last attempt waits within the request's limits instead of failing — the
    request comes back late with the oracle's tokens, not as a 504."""
    first, second, decode = cluster
    coordinator = coordinators(profile="prefill_first", coordinator_config=CONFIG)
    coordinator.register(
        [sim_instance(first, "prefill"), sim_instance(second, "prefill"), sim_instance(decode, "decode")]
    )
    attempts = CONFIG["exception_config"]["max_retry"] + 1
    async with httpx.AsyncClient(base_url=coordinator.base_url, timeout=120) as http:
        for _ in range(2 * MIN_SAMPLES):
            response = await http.post("/v1/completions", json=body(stream=False))
            assert response.status_code == 200, response.text
        try:
            for engine in (first, second):
                set_engine_faults(engine, hang=True)
            pending = asyncio.create_task(http.post("/v1/completions", json=body(stream=True)))
            began = time.monotonic()
            while stalls(coordinator, "prefill-0") + stalls(coordinator, "prefill-1") < attempts - 1:
                assert time.monotonic() - began < REQUEST_TIMEOUT / 2, "the stalled legs did not move"
                assert not pending.done(), pending.result().text
                await asyncio.sleep(0.1)
            await asyncio.sleep(2.0)  # longer than any leg's own deadline here
            assert not pending.done(), f"the last attempt was cut short: {pending.result().text}"
        finally:
            for engine in (first, second):
                set_engine_faults(engine, hang=False)
        response = await pending
        assert_oracle_stream(response)
        total = stalls(coordinator, "prefill-0") + stalls(coordinator, "prefill-1")
        assert total == attempts - 1, "the last attempt's leg is not counted as a stall"
    for engine in cluster:
        wait_engine_idle(engine)
