"""Failure semantics with faulty sim engines: no hang, no orphan leg (each engine's running/waiting requests
return to 0), no lost request before the first token (retried on another instance), an explicit SSE error
after it, and the other leg closed at once when one fails or the client leaves.

Every test first shows that its fault acted (the engines' `motor_sim_faults_fired_total{fault}` and KV failure
counters, a killed process really gone), then checks the outcome: a fault that silently did nothing fails."""

import asyncio
import signal
import socket
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from motor.protocol.instances import Endpoint
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
    StartSimEngine,
    expected_tokens,
    fresh_prompt,
    start_ready_together,
    start_sim_engine,
)

NO_FAULTS = {
    "hang": False,
    "slowdown": 1.0,
    "error_rate": 0.0,
    "kv_put_fail": False,
    "kv_get_fail": False,
    "kv_corrupt": False,
    "health_down": False,
}
ABORTED = 'vllm:request_success_total{finished_reason="abort"}'
FINISHED = 'vllm:request_success_total{finished_reason="length"}'  # max_tokens reached (ignore_eos)
FAST_FAILURE = {
    "exception_config": {"max_retry": 3, "retry_delay": 0.05, "first_token_timeout": 3, "infer_timeout": 30},
    "timeout_config": {"request_timeout": 1.5, "read_timeout": 1.5, "connection_timeout": 1},
}


def body(stream: bool = False, max_tokens: int = 8, **extra: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "model": "sim-model",
        "prompt": fresh_prompt(40),
        "max_tokens": max_tokens,
        "seed": 3,
        "temperature": 1.0,
        "ignore_eos": True,
        "return_token_ids": True,
        "stream": stream,
    }
    return payload | extra


def fired(engines: Iterable[SimEngine], fault: str) -> float:
    """How often `fault` acted on these engines so far (their motor_sim_faults_fired_total)."""
    return sum(engine_metric(e, f'motor_sim_faults_fired_total{{fault="{fault}"}}') for e in engines)


def summed(engines: Iterable[SimEngine], name: str) -> float:
    return sum(engine_metric(e, name) for e in engines)


def assert_killed(engine: SimEngine) -> None:
    """The engine process is gone, by our SIGKILL, and nothing answers on its port any more."""
    try:
        code = engine.wait_exit(timeout_s=10)
    except subprocess.TimeoutExpired:
        pytest.fail(f"engine {engine.engine_id} (pid {engine.pid}) still runs: the kill hit another process")
    assert code == -signal.SIGKILL, f"engine {engine.engine_id} exited with {code}, not by our SIGKILL"
    with (
        pytest.raises(ConnectionRefusedError),
        socket.create_connection((engine.host, engine.port), timeout=2),
    ):
        pass


def assert_oracle_tokens(response: dict[str, Any], max_tokens: int = 8) -> None:
    choice = response["choices"][0]
    assert choice["token_ids"] == expected_tokens(
        choice["prompt_token_ids"], max_tokens=max_tokens, seed=3, ignore_eos=True
    )


@dataclass
class Cluster:
    prefills: list[SimEngine]
    decodes: list[SimEngine]

    @property
    def all(self) -> list[SimEngine]:
        return [*self.prefills, *self.decodes]

    def instances(self) -> list[Any]:
        return [sim_instance(e, "prefill") for e in self.prefills] + [
            sim_instance(e, "decode") for e in self.decodes
        ]

    def assert_idle(self) -> None:
        for engine in self.all:
            wait_engine_idle(engine)


@pytest.fixture(scope="module")
def module_cluster(
    shared_mooncake_master: RunningPool, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    store = shared_mooncake_master.store_config
    prefill = {"kv_role": "kv_producer", "store_config": store}
    decode_args = ["--kv-wait-timeout-s", "10", "--itl-ms", "20", "--overhead-ms", "2"]
    decode = {"kv_role": "kv_consumer", "store_config": store, "extra_args": decode_args}
    with stopping_factory(start_sim_engine, tmp_path_factory.mktemp("coordinator-faults")) as start:
        engines = start_ready_together(
            start,
            *({**prefill, "engine_id": f"prefill-{i}"} for i in range(2)),
            *({**decode, "engine_id": f"decode-{i}"} for i in range(2)),
        )
        yield Cluster(prefills=engines[:2], decodes=engines[2:])


@pytest.fixture
def cluster(module_cluster: Cluster) -> Iterator[Cluster]:
    yield module_cluster
    for engine in module_cluster.all:
        set_engine_faults(engine, **NO_FAULTS)
    module_cluster.assert_idle()


def start(
    coordinators: StartCoordinator, cluster: Cluster, profile: str, **config: Any
) -> CoordinatorProcess:
    coordinator = coordinators(profile=profile, coordinator_config={**FAST_FAILURE, **config})
    coordinator.register(cluster.instances())
    return coordinator


async def wait_prefill_leg_held(cluster: Cluster, attempts: int) -> None:
    """Poll (every 20 ms) until a prefill engine holds a request waiting: the leg reached a hung engine."""
    for _ in range(attempts):
        if sum(engine_metric(p, "vllm:num_requests_waiting") for p in cluster.prefills):
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the prefill leg never reached a prefill engine")


async def send_all(coordinator: CoordinatorProcess, bodies: list[dict[str, Any]]) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=coordinator.base_url, timeout=60) as http:
        return await asyncio.gather(*(http.post("/v1/completions", json=b) for b in bodies))


@pytest.mark.parametrize("profile", ["prefill_first", "decode_first", "concurrent"])
async def test_prefill_5xx_is_retried_on_the_other_prefill(
    cluster: Cluster,
    coordinators: StartCoordinator,
    profile: str,
) -> None:
    set_engine_faults(cluster.prefills[0], error_rate=1.0)
    errors_before = fired(cluster.prefills[:1], "error_rate")
    prefilled_before = engine_metric(cluster.prefills[1], FINISHED)
    coordinator = start(coordinators, cluster, profile)
    responses = await send_all(coordinator, [body() for _ in range(6)])
    errors = fired(cluster.prefills[:1], "error_rate") - errors_before
    assert errors >= 1
    for response in responses:
        assert response.status_code == 200, response.text
        assert_oracle_tokens(response.json())
    # every 500 was retried, and the other prefill computed every prompt (a prefill leg is one token long)
    retried = 'motor_coordinator_retries_total{role="prefill",reason="http_500"}'
    assert coordinator_metric(coordinator, retried) == errors
    assert engine_metric(cluster.prefills[1], FINISHED) - prefilled_before == 6
    cluster.assert_idle()


async def test_decode_5xx_is_retried_on_the_other_decode(
    cluster: Cluster,
    coordinators: StartCoordinator,
) -> None:
    set_engine_faults(cluster.decodes[1], error_rate=1.0)
    errors_before = fired(cluster.decodes[1:], "error_rate")
    decoded_before = engine_metric(cluster.decodes[0], FINISHED)
    coordinator = start(coordinators, cluster, "prefill_first")
    responses = await send_all(coordinator, [body(stream=s) for s in (True, False) * 3])
    errors = fired(cluster.decodes[1:], "error_rate") - errors_before
    assert errors >= 1
    assert [r.status_code for r in responses] == [200] * 6, [r.text for r in responses]
    retried = 'motor_coordinator_retries_total{role="decode",reason="http_500"}'
    assert coordinator_metric(coordinator, retried) == errors
    assert engine_metric(cluster.decodes[0], FINISHED) - decoded_before == 6, "the other decode served all"
    cluster.assert_idle()


async def test_decode_removed_during_the_prefill_leg_falls_back_to_aggregated(
    cluster: Cluster,
    coordinators: StartCoordinator,
) -> None:
    """The flow is chosen per attempt: when the decode instances go away while the prefill leg runs, the
    retry runs aggregated on a prefill instance instead of failing with no decode instance."""
    for engine in cluster.prefills:
        set_engine_faults(engine, hang=True)
    held_before = fired(cluster.prefills, "hang")
    coordinator = start(coordinators, cluster, "prefill_first", timeout_config={"request_timeout": 20})
    async with httpx.AsyncClient(base_url=coordinator.base_url, timeout=60) as http:
        request = asyncio.create_task(http.post("/v1/completions", json=body()))
        await wait_prefill_leg_held(cluster, attempts=500)
        assert fired(cluster.prefills, "hang") - held_before == 1
        coordinator.register([sim_instance(d, "decode") for d in cluster.decodes], event="del")
        for engine in cluster.prefills:
            set_engine_faults(engine, hang=False)
        response = await request
    assert response.status_code == 200, response.text
    assert_oracle_tokens(response.json())
    assert response.json()["id"].endswith("-retry1")
    assert (
        coordinator_metric(coordinator, 'motor_coordinator_retries_total{role="decode",reason="no_instance"}')
        == 1
    )
    assert coordinator_metric(coordinator, 'motor_coordinator_leg_seconds_count{leg="aggregated"}') == 1
    assert coordinator_metric(coordinator, 'motor_coordinator_leg_seconds_count{leg="decode"}') == 0
    cluster.assert_idle()


class CutAfterFirstEvent:
    """A TCP proxy in front of an engine that passes on the response head and the first body chunk (one SSE
    event: the chat role chunk), then closes both connections — the engine dying right after it started."""

    def __init__(self, engine: SimEngine) -> None:
        self.engine = engine
        self.cuts = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    def close(self) -> None:
        if self.server is not None:
            self.server.close()

    async def _relay(self, client: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        engine, engine_writer = await asyncio.open_connection(self.engine.host, self.engine.port)
        try:
            head = await client.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            engine_writer.write(head + await client.readexactly(length))
            response_head = await engine.readuntil(b"\r\n\r\n")
            assert b"transfer-encoding: chunked" in response_head.lower(), response_head
            size_line = await engine.readuntil(b"\r\n")
            first_chunk = await engine.readexactly(int(size_line, 16) + 2)
            client_writer.write(response_head + size_line + first_chunk)
            await client_writer.drain()
            self.cuts += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            engine_writer.transport.abort()
            client_writer.transport.abort()


async def test_decode_cut_after_its_role_chunk_is_retried_without_duplicates(
    cluster: Cluster,
    coordinators: StartCoordinator,
) -> None:
    """A stream whose decode leg breaks after only the role chunk has shown nothing yet: the chunk is held
    back, the leg retried on the other decode, and the client sees one role chunk and the right tokens."""
    proxy = CutAfterFirstEvent(cluster.decodes[0])
    proxy_port = await proxy.start()
    try:
        coordinator = start(
            coordinators, cluster, "prefill_first", scheduler_config={"scheduler_type": "round_robin"}
        )
        cut_decode = sim_instance(cluster.decodes[0], "decode", instance_id="decode-cut").model_copy(
            update={"endpoints": [Endpoint(host="127.0.0.1", port=proxy_port)]}
        )
        instances = [sim_instance(p, "prefill") for p in cluster.prefills]
        coordinator.register([*instances, cut_decode, sim_instance(cluster.decodes[1], "decode")])
        async with httpx.AsyncClient(base_url=coordinator.base_url, timeout=60) as http:
            for _ in range(4):  # round robin: at least two of them go to the cut decode first
                chat = body(stream=True) | {"messages": [{"role": "user", "content": fresh_prompt(40)}]}
                del chat["prompt"]
                response = await http.post("/v1/chat/completions", json=chat)
                assert response.status_code == 200, response.text
                chunks = sse_chunks(response.text)
                assert not [c for c in chunks if "error" in c], response.text
                roles = [c for c in chunks if c["choices"] and "role" in c["choices"][0]["delta"]]
                assert len(roles) == 1, response.text
                tokens = [t for c in chunks if c["choices"] for t in c["choices"][0].get("token_ids") or []]
                assert tokens == expected_tokens(
                    roles[0]["prompt_token_ids"], max_tokens=8, seed=3, ignore_eos=True
                )
                assert response.text.endswith("data: [DONE]\n\n")
    finally:
        proxy.close()
    assert proxy.cuts >= 2
    assert coordinator_metric(coordinator, 'motor_coordinator_retries_total{role="decode"}') == proxy.cuts
    cluster.assert_idle()


async def test_hung_prefill_times_out_is_closed_and_retried(
    cluster: Cluster,
    coordinators: StartCoordinator,
) -> None:
    set_engine_faults(cluster.prefills[0], hang=True)
    hung = cluster.prefills[0]
    held_before, aborts_before = fired([hung], "hang"), engine_metric(hung, ABORTED)
    coordinator = start(
        coordinators, cluster, "prefill_first", scheduler_config={"scheduler_type": "round_robin"}
    )
    async with httpx.AsyncClient(base_url=coordinator.base_url, timeout=60) as http:
        responses = await asyncio.gather(
            *(
                http.post("/v1/completions", json=body(), headers={"X-Request-Id": f"hung-{i}"})
                for i in range(2)
            )
        )
    wait_engine_idle(hung)  # the hung leg was closed, so the engine dropped it
    # exactly one request was held by the hang, and it ended as an abort (the coordinator closed it)
    assert fired([hung], "hang") - held_before == 1
    assert engine_metric(hung, ABORTED) - aborts_before == 1
    assert [r.status_code for r in responses] == [200, 200], [r.text for r in responses]
    assert [r.headers["x-request-id"] for r in responses] == ["hung-0", "hung-1"]
    # the retried attempt carried its own engine-side id, so it cannot collide with its cancelled first leg
    assert sorted(r.json()["id"].endswith("-retry1") for r in responses) == [False, True]
    assert (
        coordinator_metric(coordinator, 'motor_coordinator_retries_total{role="prefill",reason="timeout"}')
        == 1
    )


async def test_slow_decode_misses_first_token_timeout_and_moves(
    cluster: Cluster,
    coordinators: StartCoordinator,
) -> None:
    set_engine_faults(cluster.decodes[0], slowdown=5000.0)  # 2 ms to the first token → 10 s
    slow = cluster.decodes[0]
    slowed_before, aborts_before = fired([slow], "slowdown"), engine_metric(slow, ABORTED)
    coordinator = start(
        coordinators, cluster, "decode_first", scheduler_config={"scheduler_type": "round_robin"}
    )
    responses = await send_all(coordinator, [body(stream=True) for _ in range(2)])
    wait_engine_idle(slow)
    assert (
        fired([slow], "slowdown") - slowed_before == 1
    )  # one request slowed, and abandoned by the coordinator
    assert engine_metric(slow, ABORTED) - aborts_before == 1
    for response in responses:
        assert response.status_code == 200, response.text
        assert response.text.endswith("data: [DONE]\n\n") and '"error"' not in response.text
    assert (
        coordinator_metric(coordinator, 'motor_coordinator_retries_total{role="decode",reason="timeout"}')
        == 1
    )
    cluster.assert_idle()


@pytest.mark.parametrize("fault", ["kv_put_fail", "kv_get_fail", "health_down"])
async def test_kv_and_health_faults_still_give_the_right_tokens(
    cluster: Cluster,
    coordinators: StartCoordinator,
    fault: str,
) -> None:
    for engine in cluster.all:
        set_engine_faults(engine, **{fault: True})
    counters = {
        "put_failures": (cluster.prefills, "motor_sim_kv_put_failures_total"),
        "get_failures": (cluster.decodes, "motor_sim_kv_get_failures_total"),
        "transferred": (cluster.decodes, 'vllm:prompt_tokens_cached_by_source_total{source="p2p"}'),
        "external": (cluster.decodes, 'vllm:prompt_tokens_by_source_total{source="external_kv_transfer"}'),
        "fired": (cluster.all, f'motor_sim_faults_fired_total{{fault="{fault}"}}'),
    }
    before = {name: summed(engines, metric) for name, (engines, metric) in counters.items()}
    coordinator = start(coordinators, cluster, "prefill_first")
    responses = await send_all(coordinator, [body() for _ in range(4)])
    grown = {name: summed(engines, metric) - before[name] for name, (engines, metric) in counters.items()}
    if fault == "health_down":
        # the probe answers 503 on every engine while requests are still served
        for engine in cluster.all:
            assert httpx.get(f"{engine.base_url}/health").status_code == 503
        assert grown["transferred"] == 4 * 32  # the KV path is untouched: 2 full blocks per 40-token prompt
    else:
        # every prefill's write (kv_put_fail) or every decode's read (kv_get_fail) failed: no KV was handed over
        failures = grown["put_failures"] if fault == "kv_put_fail" else grown["get_failures"]
        assert failures == grown["fired"] == 4, grown
        assert grown["transferred"] == grown["external"] == 0, grown
    for response in responses:
        assert response.status_code == 200, response.text
        assert_oracle_tokens(response.json())
    cluster.assert_idle()


async def test_every_prefill_failing_ends_with_a_clear_error(
    cluster: Cluster,
    coordinators: StartCoordinator,
) -> None:
    for engine in cluster.prefills:
        set_engine_faults(engine, error_rate=1.0)
    errors_before = fired(cluster.prefills, "error_rate")
    coordinator = start(coordinators, cluster, "prefill_first")
    [response] = await send_all(coordinator, [body(stream=True)])
    assert fired(cluster.prefills, "error_rate") - errors_before == 4  # the first attempt and 3 retries
    assert response.status_code == 502
    error = response.json()["error"]
    assert error["code"] == "http_500" and "prefill instance prefill-" in error["message"]
    assert "gave up after 4 attempts" in error["message"]
    assert coordinator_metric(coordinator, "motor_coordinator_retries_total") == 3
    cluster.assert_idle()


@pytest.mark.parametrize("profile", ["prefill_first", "decode_first", "concurrent"])
async def test_client_disconnect_closes_every_leg(
    cluster: Cluster,
    coordinators: StartCoordinator,
    profile: str,
) -> None:
    coordinator = start(coordinators, cluster, profile)
    stream_body = body(stream=True, max_tokens=2000)
    async with (
        httpx.AsyncClient(base_url=coordinator.base_url, timeout=30) as http,
        http.stream("POST", "/v1/completions", json=stream_body) as response,
    ):
        assert response.status_code == 200
        async for _ in response.aiter_bytes():
            break  # one chunk, then hang up with the decode leg mid-stream
    cluster.assert_idle()
    assert coordinator_metric(coordinator, "motor_coordinator_cancelled_legs_total") >= 1


async def test_client_disconnect_during_a_slow_prefill_closes_both_legs(
    cluster: Cluster,
    coordinators: StartCoordinator,
) -> None:
    """decode_first: the decode leg waits on the callback while the prefill leg runs; leaving then closes both."""
    for engine in cluster.prefills:
        set_engine_faults(engine, hang=True)
    held_before = fired(cluster.prefills, "hang")
    coordinator = start(coordinators, cluster, "decode_first", timeout_config={"request_timeout": 20})
    async with httpx.AsyncClient(base_url=coordinator.base_url, timeout=30) as http:
        request = asyncio.create_task(http.post("/v1/completions", json=body(stream=True)))
        await wait_prefill_leg_held(cluster, attempts=250)
        assert fired(cluster.prefills, "hang") - held_before == 1
        assert sum(engine_metric(d, "vllm:num_requests_waiting") for d in cluster.decodes) == 1
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request
    cluster.assert_idle()


async def test_failure_after_the_first_token_ends_the_stream_with_an_error_event(
    shared_mooncake_master: RunningPool,
    sim_engines: StartSimEngine,
    coordinators: StartCoordinator,
) -> None:
    store = shared_mooncake_master.store_config
    prefill = sim_engines(kv_role="kv_producer", store_config=store)
    decode = sim_engines(kv_role="kv_consumer", store_config=store, extra_args=["--itl-ms", "50"])
    coordinator = coordinators(profile="prefill_first", coordinator_config=FAST_FAILURE)
    coordinator.register([sim_instance(prefill, "prefill"), sim_instance(decode, "decode")])
    stream_body = body(stream=True, max_tokens=500)
    async with (
        httpx.AsyncClient(base_url=coordinator.base_url, timeout=30) as http,
        http.stream("POST", "/v1/completions", json=stream_body) as response,
    ):
        assert response.status_code == 200
        received = b""
        async for chunk in response.aiter_bytes():
            received += chunk
            if received.count(b"data: {") >= 3 and decode.exit_code() is None:
                decode.process.kill()  # the decode engine dies mid-stream
        text = received.decode()
    assert_killed(decode)
    chunks = sse_chunks(text)
    tokens = [t for c in chunks if c.get("choices") for t in c["choices"][0].get("token_ids") or []]
    assert 3 <= len(tokens) < stream_body["max_tokens"], "the stream did not end early"
    assert "error" not in chunks[-2] and chunks[-1]["error"]["code"] in (
        "upstream_failed",
        "incomplete_stream",
    )
    assert text.endswith("data: [DONE]\n\n")
    wait_engine_idle(prefill)


async def test_dead_prefill_instance_is_skipped_before_the_first_token(
    shared_mooncake_master: RunningPool,
    sim_engines: StartSimEngine,
    coordinators: StartCoordinator,
) -> None:
    store = shared_mooncake_master.store_config
    prefills = [sim_engines(kv_role="kv_producer", store_config=store) for _ in range(2)]
    decode = sim_engines(kv_role="kv_consumer", store_config=store)
    coordinator = coordinators(profile="prefill_first", coordinator_config=FAST_FAILURE)
    coordinator.register([*(sim_instance(p, "prefill") for p in prefills), sim_instance(decode, "decode")])
    prefills[0].process.kill()
    assert_killed(prefills[0])
    responses = await send_all(coordinator, [body(stream=s) for s in (False, True) * 3])
    assert [r.status_code for r in responses] == [200] * 6, [r.text for r in responses]
    assert (
        coordinator_metric(coordinator, 'motor_coordinator_retries_total{role="prefill",reason="connect"}')
        >= 1
    )
    for engine in (prefills[1], decode):
        wait_engine_idle(engine)


async def test_infer_timeout_ends_a_started_stream_with_an_error_event(
    cluster: Cluster,
    coordinators: StartCoordinator,
) -> None:
    coordinator = start(coordinators, cluster, "prefill_first", exception_config={"infer_timeout": 1.5})
    async with httpx.AsyncClient(base_url=coordinator.base_url, timeout=30) as http:
        response = await http.post("/v1/completions", json=body(stream=True, max_tokens=1000))
    assert response.status_code == 200
    chunks = sse_chunks(response.text)
    assert [t for c in chunks[:-1] if c["choices"] for t in c["choices"][0].get("token_ids") or []], (
        "the stream had started"
    )
    assert chunks[-1]["error"]["code"] == "infer_timeout"
    assert response.text.endswith("data: [DONE]\n\n")
    cluster.assert_idle()
