"""End to end on the real engine: a copy of examples/local deployed by `motor deploy` (the local backend: a real
mooncake_master, the controller, the coordinator, node managers and vLLM CPU engines with
MultiConnector[MooncakeConnector (tcp), MooncakeStoreConnector], dispatch profile concurrent) and served through
the coordinator.

The copy differs from the example in what a test needs: free ports, its own job id, 2 prefill instances (so a
repeated prefix can land on the other one, which only has it through the pool) and
`enable_prompt_tokens_details` (without it vLLM leaves `usage.prompt_tokens_details` out, so `cached_tokens`
could not be seen). The model path stays relative (`.motor/models/tiny`, written by `motor model tiny` in the
directory `motor deploy` runs from): the local deploy resolves it.

"Aggregated" is the same prompt sent straight to the decode engine without kv_transfer_params: the same process,
weights, kernels and config as the decode leg of the PD request, so the only difference is where the prompt's KV
came from — and it needs no extra engine. The module starts 3 engines once (about 9 GB, 60-90 s on 2 cores);
the last test kills the decode engine, so it runs last.
"""

import json
import os
import random
import re
import secrets
import signal
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from motor.config import load_config
from motor.config.ports import instance_ports
from motor.engine.patches.facts import gather_facts
from motor.engine.patches.registry import decide_all
from motor.pool.metrics import scrape_pool
from tests.fixtures.control import pid_alive
from tests.fixtures.kv_handover import assert_kv_handover, decode_counters
from tests.fixtures.local_example import (
    build_tiny_model,
    deployed,
    engine_api_server_pid,
    log_tails,
    write_local_example,
)
from tests.fixtures.otlp import OtlpReceiver, ReceivedSpan, otlp_receiver
from tests.installs import needs_vllm

pytestmark = [
    pytest.mark.slow,
    needs_vllm,
]

MODEL_DIR = ".motor/models/tiny"  # the example's (relative) model path
JOB_ID = "motor-e2e-vllm"
REQUEST_TIMEOUT_S = 120.0
GREEDY = {"model": "tiny", "temperature": 0, "ignore_eos": True, "return_token_ids": True}
EXTERNAL = 'source="external_kv_transfer"'
LOCAL = 'source="local_compute"'
BY_SOURCE = "vllm:prompt_tokens_by_source_total"


@dataclass(frozen=True)
class Deployment:
    root: Path  # where `motor deploy` ran
    run_root: Path
    api_url: str
    engines: dict[str, str]  # instance id → engine base URL
    block_size: int
    pool_metrics_url: str  # the mooncake_master's Prometheus endpoint

    @property
    def decode(self) -> str:
        return self.engines["decode-0"]

    @property
    def prefills(self) -> dict[str, str]:
        return {name: url for name, url in self.engines.items() if name.startswith("prefill-")}

    def decode_engine_pid(self) -> int:
        return engine_api_server_pid(self.run_root, JOB_ID, "decode-0", int(self.decode.rsplit(":", 1)[1]))

    def coordinator_log(self) -> str:
        return (self.run_root / JOB_ID / "logs" / "coordinator.log").read_text(errors="replace")

    def log_tails(self, lines: int = 30) -> str:
        return log_tails(self.run_root, JOB_ID, lines)


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    """Where the coordinator and the vLLM engines export their traces (gRPC, the default protocol)."""
    with otlp_receiver("grpc") as running:
        yield running


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory, receiver: OtlpReceiver) -> Iterator[Deployment]:
    root = tmp_path_factory.mktemp("e2e-vllm")
    log_path = root / "motor-cli.log"
    build_tiny_model(root, MODEL_DIR, log_path)
    config_dir = write_local_example(root / "config", JOB_ID, extra_env={"OTEL_BSP_SCHEDULE_DELAY": "200"})
    user_path = config_dir / "user_config.json"
    user = json.loads(user_path.read_text())
    user["motor_coordinator_config"]["tracer_config"] = {"endpoint": receiver.endpoint}
    user_path.write_text(json.dumps(user, indent=2))
    for section in ("motor_engine_prefill_config", "motor_engine_decode_config"):
        assert (
            json.loads((config_dir / "user_config.json").read_text())[section]["engine_config"]["model"]
            == MODEL_DIR
        )
    run_root = root / "run"
    topology = load_config(config_dir / "user_config.json", config_dir / "env.json")
    assert topology.pool is not None
    engines = {p.name: f"http://127.0.0.1:{p.engine_port}" for p in instance_ports(topology.roles)}
    api = topology.user.motor_coordinator_config.api_config
    deploy = Deployment(
        root=root,
        run_root=run_root,
        api_url=f"http://127.0.0.1:{api.coordinator_api_infer_port}",
        engines=engines,
        block_size=int(topology.roles["decode"].engine_config["block_size"]),
        pool_metrics_url=f"http://127.0.0.1:{topology.pool.metrics_port}/metrics",
    )
    with deployed(root, config_dir, run_root, JOB_ID, log_path):
        yield deploy


# ---- helpers ---------------------------------------------------------------------------------------------------


def metric(base_url: str, name: str, label: str = "") -> float:
    """Sum of a Prometheus series' samples (exact metric name) whose labels contain `label`."""
    text = httpx.get(f"{base_url}/metrics", timeout=10).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        series, _, value = line.rpartition(" ")
        if series.split("{", 1)[0] == name and label in series:
            total += float(value)
    return total


def random_prompts(count: int, length: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, 512) for _ in range(length + 8 * i)] for i in range(count)]


def complete(base_url: str, prompt: list[int], max_tokens: int) -> dict[str, Any]:
    body = {**GREEDY, "prompt": prompt, "max_tokens": max_tokens}
    response = httpx.post(f"{base_url}/v1/completions", json=body, timeout=REQUEST_TIMEOUT_S)
    assert response.status_code == 200, f"{base_url}: {response.status_code} {response.text}"
    return response.json()


@dataclass
class Streamed:
    status: int
    events: list[str]  # the data payloads, in order ("[DONE]" included)
    first_token_s: float | None  # from sending to the first chunk with output

    def chunks(self) -> list[dict[str, Any]]:
        return [json.loads(event) for event in self.events if event != "[DONE]"]

    def token_ids(self) -> list[int]:
        return [
            t for chunk in self.chunks() for c in chunk.get("choices", []) for t in c.get("token_ids") or []
        ]

    def usage(self) -> dict[str, Any]:
        (usage,) = [chunk["usage"] for chunk in self.chunks() if chunk.get("usage")]
        return usage


def has_output(chunk: dict[str, Any]) -> bool:
    """A chunk carrying output: token ids (with return_token_ids) or text (a token's text may be empty)."""
    return any(
        c.get("token_ids") or c.get("text") or (c.get("delta") or {}).get("content")
        for c in chunk.get("choices", [])
    )


def stream(url: str, body: dict[str, Any]) -> Streamed:
    started = time.perf_counter()
    first: float | None = None
    events: list[str] = []
    with httpx.stream("POST", url, json={**body, "stream": True}, timeout=REQUEST_TIMEOUT_S) as response:
        assert response.status_code == 200, f"{response.status_code} {response.read()!r}"
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if not line:
                continue
            assert line.startswith("data: "), f"not an SSE data line: {line!r}"
            events.append(line[6:])
            if first is None and events[-1] != "[DONE]" and has_output(json.loads(events[-1])):
                first = time.perf_counter() - started
        return Streamed(response.status_code, events, first)


def pool_keys_settled(deploy: Deployment, at_least: int, timeout_s: float = 30.0) -> int:
    """The master's key count once it reached `at_least` and stopped changing (or whatever it is at the timeout)."""
    deadline = time.monotonic() + timeout_s
    last = -1
    while True:
        count = scrape_pool(deploy.pool_metrics_url).key_count
        if (count >= at_least and count == last) or time.monotonic() > deadline:
            return count
        last = count
        time.sleep(0.3)


def coordinator_retries(deploy: Deployment) -> list[str]:
    return [line for line in deploy.coordinator_log().splitlines() if "retrying" in line]


# ---- tests (in order: the last one kills the decode engine) --------------------------------------------------


def test_pd_greedy_output_equals_aggregated_and_the_prompt_kv_came_by_transfer(
    deployment: Deployment,
) -> None:
    decode = deployment.decode
    batch = random_prompts(6, 64, seed=11)
    external_before, local_before = metric(decode, BY_SOURCE, EXTERNAL), metric(decode, BY_SOURCE, LOCAL)
    aggregated = [complete(decode, prompt, 24)["choices"][0]["token_ids"] for prompt in batch]
    assert metric(decode, BY_SOURCE, EXTERNAL) == external_before, "aggregated requests computed their KV"
    assert metric(decode, BY_SOURCE, LOCAL) - local_before == sum(map(len, batch))
    assert len({tuple(tokens) for tokens in aggregated}) == len(batch), "the model ignores its context"

    before = decode_counters(decode)
    for prompt, expected in zip(batch, aggregated, strict=True):
        answer = complete(deployment.api_url, prompt, 24)
        assert answer["choices"][0]["token_ids"] == expected, "PD greedy output differs from aggregated"
        assert answer["usage"]["prompt_tokens"] == len(prompt)
    after = decode_counters(decode)
    assert_kv_handover(before, after, [len(prompt) for prompt in batch], deployment.block_size)
    external, local = (
        after.by_source[s] - before.by_source[s] for s in ("external_kv_transfer", "local_compute")
    )
    print(
        f"decode engine: {external:.0f} of {sum(map(len, batch))} prompt tokens by transfer, {local:.0f} computed"
    )


def test_each_engine_binds_its_own_store_lookup_socket(deployment: Deployment) -> None:
    """MooncakeStoreConnector's scheduler asks its worker over an IPC socket named by lookup_rpc_port; engines
    sharing one (vLLM's default 0) stall each other's schedulers, so motor numbers them per instance."""
    bound = Path("/proc/net/unix").read_text()
    host = socket.gethostname()
    for lookup_id in range(len(deployment.engines)):
        assert f"/lookup_rpc_port_{lookup_id}_host_{host}_dp_rank0" in bound, (
            f"no engine bound lookup id {lookup_id}"
        )


def test_every_engine_runs_with_the_fixes_that_apply_here(deployment: Deployment) -> None:
    """The engine server's shim installs each gated fix in the engine processes (`motor patch status` says
    which apply): each engine's log names every one of them as applied."""
    facts = gather_facts()
    expected = {patch.name for patch, decision in decide_all(facts) if decision.applies}
    if facts.vllm_version == "0.32.0" and facts.accelerator_present is False:
        assert {"cpu-idle-step-backoff", "cpu-mooncake-device-index"} <= expected
    for name in deployment.engines:
        log = (deployment.run_root / JOB_ID / name / "engine.log").read_text(errors="replace")
        assert expected <= set(re.findall(r"motor patch (\S+) applied", log)), name


def test_repeated_prefix_is_a_pool_hit_with_the_same_answer(
    deployment: Deployment, record_property: Any
) -> None:
    """A prompt whose prefix an earlier prompt stored in the pool gets that prefix's KV from the pool (prefix
    caching is off, so a cached token can only come from there) and the same tokens as computing it.

    Which prefill instance serves the repeat is the scheduler's choice (load_balance sends it to the other one)
    and a leg that stalls is retried elsewhere by design, so the test asserts the pool hit and the answer, not the
    instance."""
    rng = random.Random(23)
    prefix = [rng.randrange(3, 512) for _ in range(32 * deployment.block_size)]
    first_prompt = prefix + [rng.randrange(3, 512) for _ in range(16)]
    repeat_prompt = prefix + [rng.randrange(3, 512) for _ in range(16)]
    expected = complete(deployment.decode, repeat_prompt, 16)["choices"][0]["token_ids"]
    body = {**GREEDY, "max_tokens": 16, "stream_options": {"include_usage": True}}
    url = f"{deployment.api_url}/v1/completions"

    keys_before = scrape_pool(deployment.pool_metrics_url).key_count
    miss = stream(url, {**body, "prompt": first_prompt})
    # The prefill saves its blocks to the pool after it answered; the repeat is meant to find them there (a
    # repeat racing that save is not what this test is about), and the save itself must happen.
    stored = pool_keys_settled(deployment, at_least=keys_before + len(prefix) // deployment.block_size)
    assert stored >= keys_before + len(prefix) // deployment.block_size, (
        f"the miss did not store its prefix blocks in the pool: {keys_before} → {stored} keys"
    )
    externals = {name: metric(u, BY_SOURCE, EXTERNAL) for name, u in deployment.prefills.items()}
    hits_before = scrape_pool(deployment.pool_metrics_url).get_hits
    hit = stream(url, {**body, "prompt": repeat_prompt})

    assert miss.usage()["prompt_tokens_details"]["cached_tokens"] == 0
    cached = hit.usage()["prompt_tokens_details"]["cached_tokens"]
    assert 0 < cached <= len(prefix), f"the repeated prefix was not a pool hit: cached {cached}"
    from_pool = {
        name: metric(u, BY_SOURCE, EXTERNAL) - externals[name] for name, u in deployment.prefills.items()
    }
    assert cached in from_pool.values(), (
        f"no prefill instance loaded {cached} tokens from outside: {from_pool}"
    )
    assert scrape_pool(deployment.pool_metrics_url).get_hits > hits_before, "the master saw no pool hit"
    assert hit.token_ids() == expected, "the pool's KV gave other tokens than computing the prompt"
    assert miss.first_token_s is not None and hit.first_token_s is not None
    # Recorded, not asserted (timing belongs in benchmarks/).
    record_property("ttft_miss_ms", round(miss.first_token_s * 1000, 1))
    record_property("ttft_pool_hit_ms", round(hit.first_token_s * 1000, 1))
    served = [name for name, tokens in from_pool.items() if tokens]
    print(
        f"TTFT through the coordinator, {len(repeat_prompt)}-token prompt: miss {miss.first_token_s * 1000:.0f} "
        f"ms, pool hit on {served} ({cached} cached tokens) {hit.first_token_s * 1000:.0f} ms; coordinator "
        f"retries so far: {len(coordinator_retries(deployment))}"
    )


def test_chat_streams_through_the_coordinator(deployment: Deployment) -> None:
    messages = [{"role": "user", "content": "Stream a few words about prefill and decode, please."}]
    body = {**GREEDY, "messages": messages, "max_tokens": 24}
    direct = httpx.post(f"{deployment.decode}/v1/chat/completions", json=body, timeout=REQUEST_TIMEOUT_S)
    assert direct.status_code == 200, direct.text
    expected = direct.json()["choices"][0]["token_ids"]

    before = decode_counters(deployment.decode)
    streamed = stream(
        f"{deployment.api_url}/v1/chat/completions", {**body, "stream_options": {"include_usage": True}}
    )
    prompt_tokens = streamed.usage()["prompt_tokens"]
    assert_kv_handover(before, decode_counters(deployment.decode), prompt_tokens, deployment.block_size)
    assert streamed.events[-1] == "[DONE]" and streamed.events.count("[DONE]") == 1
    chunks = streamed.chunks()
    assert not [chunk for chunk in chunks if "error" in chunk]
    assert chunks[0]["choices"][0]["delta"].get("role") == "assistant"
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    assert len({chunk["id"] for chunk in chunks}) == 1
    # No chunk count is asserted: vLLM merges decode steps into one chunk when its output consumer falls behind
    # (3 chunks for 24 tokens on a busy host); token-by-token relaying is covered with the sim engine.
    finishes = [c["finish_reason"] for chunk in chunks for c in chunk["choices"] if c.get("finish_reason")]
    assert finishes == ["length"]
    assert streamed.usage()["completion_tokens"] == 24
    assert streamed.token_ids() == expected, "streamed PD tokens differ from the aggregated answer"
    text = "".join((c.get("delta") or {}).get("content") or "" for chunk in chunks for c in chunk["choices"])
    assert text == direct.json()["choices"][0]["message"]["content"]


def test_the_official_anthropic_client_through_the_pd_path(deployment: Deployment) -> None:
    """/v1/messages, streamed and not, answers what vLLM's own chat path answers to the same conversation."""
    messages = [{"role": "user", "content": "Say something short about caches."}]
    direct = httpx.post(
        f"{deployment.decode}/v1/chat/completions",
        json={"model": "tiny", "temperature": 0, "max_tokens": 12, "messages": messages},
        timeout=REQUEST_TIMEOUT_S,
    )
    assert direct.status_code == 200, direct.text
    expected = direct.json()
    text = expected["choices"][0]["message"]["content"]
    usage = (expected["usage"]["prompt_tokens"], expected["usage"]["completion_tokens"])
    stop = {"length": "max_tokens", "stop": "end_turn"}[expected["choices"][0]["finish_reason"]]
    client = anthropic.Anthropic(
        api_key="unused", base_url=deployment.api_url, max_retries=0, timeout=REQUEST_TIMEOUT_S
    )
    greedy = {"temperature": 0}  # the client no longer takes temperature itself
    message = client.messages.create(model="tiny", max_tokens=12, messages=messages, extra_body=greedy)  # type: ignore[arg-type]
    assert message.content[0].text == text  # type: ignore[union-attr]
    assert (message.usage.input_tokens, message.usage.output_tokens) == usage
    assert message.stop_reason == stop
    with client.messages.stream(model="tiny", max_tokens=12, messages=messages, extra_body=greedy) as stream:  # type: ignore[arg-type]
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == text
    assert (final.usage.input_tokens, final.usage.output_tokens) == usage
    assert final.stop_reason == stop


def test_a_forced_tool_call_through_the_pd_path_is_a_tool_use_block(deployment: Deployment) -> None:
    """Anthropic tools on /v1/messages: a named tool_choice makes vLLM fill the tool's input schema (structured
    output); the answer is a tool_use block holding vLLM's own chat answer's tool call, streamed and not."""
    schema = {  # an enum: the random tiny model closes the JSON in about 40 tokens (a free string may not end)
        "type": "object",
        "properties": {"unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["unit"],
        "additionalProperties": False,
    }
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    direct = httpx.post(
        f"{deployment.decode}/v1/chat/completions",
        json={
            "model": "tiny",
            "temperature": 0,
            "max_tokens": 128,
            "messages": messages,
            "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": schema}}],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        },
        timeout=REQUEST_TIMEOUT_S,
    )
    assert direct.status_code == 200, direct.text
    assert direct.json()["choices"][0]["finish_reason"] == "stop", direct.text
    (call,) = direct.json()["choices"][0]["message"]["tool_calls"]
    expected = json.loads(call["function"]["arguments"])
    client = anthropic.Anthropic(
        api_key="unused", base_url=deployment.api_url, max_retries=0, timeout=REQUEST_TIMEOUT_S
    )
    request = {
        "model": "tiny",
        "max_tokens": 128,
        "messages": messages,
        "tools": [{"name": "get_weather", "description": "the weather in a city", "input_schema": schema}],
        "tool_choice": {"type": "tool", "name": "get_weather"},
        "extra_body": {"temperature": 0},
    }
    message = client.messages.create(**request)  # type: ignore[call-overload]
    (block,) = message.content
    assert block.type == "tool_use" and block.name == "get_weather", message
    assert block.input == expected and message.stop_reason == "tool_use"
    with client.messages.stream(**request) as stream:  # type: ignore[arg-type]
        final = stream.get_final_message()
    (streamed,) = final.content
    assert streamed.type == "tool_use" and streamed.input == expected and final.stop_reason == "tool_use"


def test_a_pd_request_is_one_trace_with_vllms_spans(deployment: Deployment, receiver: OtlpReceiver) -> None:
    trace_id, client_span = secrets.token_hex(16), secrets.token_hex(8)
    response = httpx.post(
        f"{deployment.api_url}/v1/completions",
        json={**GREEDY, "prompt": "Traces join the legs.", "max_tokens": 4},
        headers={"traceparent": f"00-{trace_id}-{client_span}-01"},
        timeout=REQUEST_TIMEOUT_S,
    )
    assert response.status_code == 200, response.text

    def whole(spans: list[ReceivedSpan]) -> bool:
        names = [s.name for s in spans if s.trace_id == trace_id]
        return names.count("llm_request") >= 2 and "completions" in names

    spans = {s.span_id: s for s in receiver.wait_for(whole, timeout_s=30) if s.trace_id == trace_id}
    (request,) = [s for s in spans.values() if s.parent_span_id == client_span]
    assert request.service == "motor-coordinator" and request.attributes["http.response.status_code"] == 200
    engine_spans = [s for s in spans.values() if s.name == "llm_request"]
    legs = {spans[s.parent_span_id].name for s in engine_spans if s.parent_span_id in spans}
    assert legs == {"prefill", "decode"}, "vLLM's spans are children of the legs that reached them"
    assert {spans[spans[s.parent_span_id].parent_span_id].name for s in engine_spans} == {"attempt"}


def test_models_name_the_engine_that_serves_them(deployment: Deployment) -> None:
    models = httpx.get(f"{deployment.api_url}/v1/models", timeout=10).json()["data"]
    assert [(model["id"], model["owned_by"]) for model in models] == [("tiny", "vllm")]


def test_killing_the_decode_engine_mid_stream_ends_the_stream_explicitly(deployment: Deployment) -> None:
    engine_pid = deployment.decode_engine_pid()
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "Tell a very long story about caches."}],
        "max_tokens": 1800,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
    }
    outputs_before_kill = 20
    events: list[str] = []
    outputs = 0
    killed_at: float | None = None
    error_body = b""
    # Every read is bounded: a silent stream (the coordinator not ending it) fails the test with ReadTimeout
    # instead of hanging. How soon it ended is printed, not asserted (timing belongs in benchmarks/).
    timeout = httpx.Timeout(connect=10, read=60, write=10, pool=10)
    with httpx.stream("POST", f"{deployment.api_url}/v1/chat/completions", json=body, timeout=timeout) as r:
        status = r.status_code
        if status == 200:
            for line in r.iter_lines():
                if not line.startswith("data: "):
                    continue
                events.append(line[6:])
                if events[-1] != "[DONE]" and has_output(json.loads(events[-1])):
                    outputs += 1
                if outputs == outputs_before_kill and killed_at is None:
                    os.kill(engine_pid, signal.SIGKILL)
                    killed_at = time.monotonic()
        else:
            error_body = r.read()
    ended_at = time.monotonic()

    assert status == 200 and killed_at is not None, f"the stream did not start: {status} {error_body!r}"
    # A big multi-threaded process can still be tearing down (its sockets already closed) when the stream ends.
    gone_by = time.monotonic() + 10
    while pid_alive(engine_pid) and time.monotonic() < gone_by:
        time.sleep(0.1)
    assert not pid_alive(engine_pid), "the decode engine survived the kill"
    chunks = [json.loads(event) for event in events if event != "[DONE]"]
    errors = [chunk["error"] for chunk in chunks if "error" in chunk]
    finished = [
        c["finish_reason"] for chunk in chunks for c in chunk.get("choices", []) if c.get("finish_reason")
    ]
    assert events[-1] == "[DONE]", f"the stream ended without [DONE]: {events[-3:]}"
    # The kill cut the answer short: fewer tokens than asked, no normal finish, and an explicit error event.
    assert outputs < body["max_tokens"] and finished == [], (
        f"the stream completed: {outputs} outputs {events[-3:]}"
    )
    (error,) = errors
    assert error["type"] and error["message"] and "decode" in error["message"], error
    print(f"decode engine killed; stream ended {ended_at - killed_at:.2f} s later with: {error['message']}")
