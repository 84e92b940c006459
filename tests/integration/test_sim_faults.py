"""Every request-flow fault of the simulator, set by flag at start or at runtime through /admin/faults.

(The KV faults are covered with the pool in test_sim_pd.py.)
"""

import asyncio

import httpx
import pytest

from motor.engine.sim.faults import Faults
from motor.engine.sim.server import CRASH_EXIT_CODE
from tests.fixtures.sim import SIM_ADMIN, SimEngine, StartSimEngine

BODY = {"prompt": "fault injection test prompt", "max_tokens": 3}


def complete(engine: SimEngine, timeout: float = 10.0) -> httpx.Response:
    return httpx.post(f"{engine.base_url}/v1/completions", json=BODY, timeout=timeout)


def set_faults(engine: SimEngine, **faults: object) -> httpx.Response:
    return httpx.post(f"{engine.base_url}/admin/faults", json=faults, headers=SIM_ADMIN)


async def scrape(client: httpx.AsyncClient) -> dict[str, float]:
    """The engine's metrics as {series: value}."""
    text = (await client.get("/metrics")).text
    return {
        series: float(value)
        for series, _, value in (
            line.rpartition(" ") for line in text.splitlines() if line[:1] not in ("#", "")
        )
    }


def test_admin_api_reads_and_partially_updates_the_fault_set(sim_engines: StartSimEngine) -> None:
    engine = sim_engines(extra_args=["--fault-kv-corrupt", "--fault-slowdown", "2"])
    current = httpx.get(f"{engine.base_url}/admin/faults", headers=SIM_ADMIN).json()
    assert current == Faults(kv_corrupt=True, slowdown=2).model_dump()

    updated = set_faults(engine, error_rate=0.5)
    assert updated.status_code == 200
    assert updated.json() == Faults(kv_corrupt=True, slowdown=2, error_rate=0.5).model_dump()

    for bad, field in (
        ({"slowdwn": 3}, "slowdwn"),
        ({"error_rate": 7}, "error_rate"),
        ({"hang": "maybe"}, "hang"),
    ):
        refused = set_faults(engine, **bad)
        assert refused.status_code == 400 and refused.json()["error"]["param"] == field
    assert httpx.post(f"{engine.base_url}/admin/faults", content=b"[1]", headers=SIM_ADMIN).status_code == 400
    assert httpx.get(f"{engine.base_url}/admin/faults", headers=SIM_ADMIN).json() == updated.json()


@pytest.mark.parametrize("at_start", [True, False])
def test_crash_after_n_completed_requests(sim_engines: StartSimEngine, at_start: bool) -> None:
    engine = sim_engines(extra_args=["--fault-crash-after", "2"] if at_start else [])
    if not at_start:
        assert complete(engine).status_code == 200  # completions before arming do not count
        assert set_faults(engine, crash_after=2).status_code == 200
    assert complete(engine).status_code == 200
    assert complete(engine).status_code == 200
    assert engine.wait_exit(timeout_s=10) == CRASH_EXIT_CODE
    assert "fault crash_after: 2 requests completed" in engine.log_text()


async def test_hang_holds_requests_until_cleared_or_abandoned(sim_engines: StartSimEngine) -> None:
    engine = sim_engines(extra_args=["--fault-hang"])
    async with httpx.AsyncClient(base_url=engine.base_url, timeout=10) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.post("/v1/completions", json=BODY, timeout=0.5)
        assert (await client.get("/health")).status_code == 200  # the server itself still answers

        pending = asyncio.ensure_future(client.post("/v1/completions", json=BODY))
        # the engine holds it (no sleep-and-hope: its own counters say the hang fault took the request)
        held = 'motor_sim_faults_fired_total{engine="0",fault="hang",model_name="sim-model"}'
        waiting = 'vllm:num_requests_waiting{engine="0",model_name="sim-model"}'
        async with asyncio.timeout(10):
            while (await scrape(client))[held] < 2:
                await asyncio.sleep(0.02)
        assert (await scrape(client))[waiting] == 1 and not pending.done()
        assert (
            await client.post("/admin/faults", json={"hang": False}, headers=SIM_ADMIN)
        ).status_code == 200
        released = await asyncio.wait_for(pending, 5)
        assert released.status_code == 200 and released.json()["choices"][0]["finish_reason"] == "length"

        # the request abandoned by its client is counted once the engine noticed the disconnect
        aborted = 'vllm:request_success_total{engine="0",finished_reason="abort",model_name="sim-model"}'
        async with asyncio.timeout(10):
            while (samples := await scrape(client)).get(aborted, 0) < 1:
                await asyncio.sleep(0.02)
        assert (samples[aborted], samples[waiting]) == (1, 0)


def test_slowdown_multiplies_the_latency_model(sim_engines: StartSimEngine) -> None:
    # 20 ms of modelled latency: answered well within 3 s, but not when slowed down 1000 times (20 s)
    engine = sim_engines(extra_args=["--overhead-ms", "20", "--fault-slowdown", "1000"])
    with pytest.raises(httpx.ReadTimeout):
        complete(engine, timeout=3)
    assert set_faults(engine, slowdown=1).status_code == 200
    assert complete(engine, timeout=3).status_code == 200


def test_error_rate_answers_500_with_an_openai_body(sim_engines: StartSimEngine) -> None:
    engine = sim_engines(extra_args=["--fault-error-rate", "1"])
    failed = complete(engine)
    assert failed.status_code == 500
    assert failed.json()["error"]["type"] == "InternalServerError"
    assert "error_rate" in failed.json()["error"]["message"]
    assert set_faults(engine, error_rate=0).status_code == 200
    assert complete(engine).status_code == 200
    metrics = httpx.get(f"{engine.base_url}/metrics").text
    assert 'motor_sim_injected_errors_total{engine="0",model_name="sim-model"} 1.0' in metrics


def test_health_down_and_back(sim_engines: StartSimEngine) -> None:
    engine = sim_engines(extra_args=["--fault-health-down"])
    down = httpx.get(f"{engine.base_url}/health")
    assert down.status_code == 503 and "health_down" in down.json()["error"]["message"]
    assert complete(engine).status_code == 200  # only the health probe is affected
    assert set_faults(engine, health_down=False).status_code == 200
    assert httpx.get(f"{engine.base_url}/health").status_code == 200
