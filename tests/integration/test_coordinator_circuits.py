"""Circuit breakers against live sim engines: an instance that answers 500s while its heartbeats go on costs
`failure_threshold` retries per trip and then no more legs while its circuit is open; when the timer ends a
/health probe decides (503: open again, longer; 200: closed), and a served leg forgets the trips. With several
inference workers the supervisor keeps the breakers and every worker routes around an open circuit."""

import time
from collections.abc import Callable, Iterator
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
)
from tests.fixtures.processes import stopping_factory
from tests.fixtures.sim import (
    SimEngine,
    expected_tokens,
    fresh_prompt,
    start_ready_together,
    start_sim_engine,
)

CIRCUIT = {"failure_threshold": 3, "base_timeout_s": 2.0, "max_timeout_s": 8.0}
FINISHED = 'vllm:request_success_total{finished_reason="length"}'


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[SimEngine]]:
    with stopping_factory(start_sim_engine, tmp_path_factory.mktemp("coordinator-circuits")) as start:
        yield start_ready_together(start, {"engine_id": "healthy"}, {"engine_id": "flapping"})


@pytest.fixture
def flapping(engines: list[SimEngine]) -> Iterator[SimEngine]:
    yield engines[1]
    set_engine_faults(engines[1], error_rate=0.0, health_down=False)


def errors(engine: SimEngine) -> float:
    return engine_metric(engine, 'motor_sim_faults_fired_total{fault="error_rate"}')


def circuit(coordinator: CoordinatorProcess, name: str, instance: str) -> float:
    return coordinator_metric(coordinator, f'motor_coordinator_circuit_{name}{{instance="{instance}"}}')


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def ask(http: httpx.Client, count: int) -> None:
    for _ in range(count):
        body: dict[str, Any] = {
            "model": "sim-model",
            "prompt": fresh_prompt(20),
            "max_tokens": 4,
            "ignore_eos": True,
            "seed": 3,
            "return_token_ids": True,
        }
        response = http.post("/v1/completions", json=body)
        assert response.status_code == 200, response.text
        choice = response.json()["choices"][0]
        assert choice["token_ids"] == expected_tokens(
            choice["prompt_token_ids"], max_tokens=4, seed=3, ignore_eos=True
        )


@pytest.mark.parametrize("workers", [1, 2])
def test_a_flapping_instance_costs_threshold_retries_per_trip_then_probe_decides(
    engines: list[SimEngine], flapping: SimEngine, coordinators: StartCoordinator, workers: int
) -> None:
    coordinator = coordinators(
        profile="aggregated",
        coordinator_config={
            "circuit_config": CIRCUIT,
            "exception_config": {"max_retry": 3, "retry_delay": 0.01},
            "inference_workers_config": {"num_workers": workers},
        },
    )
    coordinator.register([sim_instance(e, "union") for e in engines])
    set_engine_faults(flapping, error_rate=1.0)
    before = errors(flapping)
    # a new connection per request: with several workers the kernel spreads them over every worker
    fresh_connections = httpx.Limits(max_keepalive_connections=0)
    with httpx.Client(base_url=coordinator.base_url, timeout=30, limits=fresh_connections) as http:
        ask(http, 12)
        assert circuit(coordinator, "open", "flapping") == 1
        assert circuit(coordinator, "trips_total", "flapping") == 1
        assert coordinator.mgmt_get("/instances")[1]["open_circuits"] == ["flapping"]
        first_trip = errors(flapping) - before
        # every failure was a retry that the healthy instance answered; once open, no leg reaches it
        assert 3 <= first_trip <= 3 + workers, (
            "failures beyond the threshold (one report in flight per worker)"
        )
        ask(http, 6)
        assert errors(flapping) - before == first_trip, "an open circuit still got legs"
        retried = 'motor_coordinator_retries_total{role="union",reason="http_500"}'
        assert coordinator_metric(coordinator, retried) == first_trip

        # the timer ends, /health answers 200 (its 500s are for requests only): closed, and the next failures
        # open it again for twice as long
        wait_until(lambda: circuit(coordinator, "open", "flapping") == 0, "the probe to close the circuit")
        wait_until(
            lambda: (ask(http, 1), circuit(coordinator, "trips_total", "flapping"))[1] == 2,
            "the second trip",
        )
        assert circuit(coordinator, "open", "flapping") == 1

        # health down while open: the probe fails and the circuit opens again without a leg reaching it
        errors_at_second_trip = errors(flapping)
        set_engine_faults(flapping, error_rate=0.0, health_down=True)
        wait_until(lambda: circuit(coordinator, "trips_total", "flapping") == 3, "the failed probe")
        assert circuit(coordinator, "open", "flapping") == 1
        assert errors(flapping) == errors_at_second_trip

        # healthy again: the next probe closes it and the instance serves; a served leg drops its breaker
        set_engine_faults(flapping, health_down=False)
        wait_until(lambda: circuit(coordinator, "open", "flapping") == 0, "the probe to pass", timeout_s=20)
        served = engine_metric(flapping, FINISHED)
        wait_until(
            lambda: (ask(http, 2), engine_metric(flapping, FINISHED) > served)[1],
            "a leg on the closed instance",
        )
        _, text = coordinator.mgmt_get("/metrics")
        assert 'motor_coordinator_circuit_open{instance="flapping"}' not in text, "breaker still on record"
        assert circuit(coordinator, "trips_total", "flapping") == 3
