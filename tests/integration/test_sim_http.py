"""The simulator's HTTP surface, against real engine processes (no pool)."""

import json
import time
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from motor.engine.sim.config import OWNED_BY
from motor.tokenize.sim_vocab import EOS_ID, decode
from tests.fixtures.sim import SimEngine, StartSimEngine, expected_tokens, openai_body

PROMPT = (
    "the quick brown fox jumps over the lazy dog and keeps running through the field until the sun goes down"
)


@pytest.fixture
def engine(sim_engines: StartSimEngine) -> SimEngine:
    return sim_engines(model="sim-model")


def sse_events(raw: bytes) -> list[Any]:
    """Parse an SSE body strictly: every event is `data: <payload>\\n\\n`, the last one is [DONE]."""
    assert raw.endswith(b"data: [DONE]\n\n")
    frames = raw.split(b"\n\n")
    assert frames[-1] == b""
    events = []
    for frame in frames[:-1]:
        assert frame.startswith(b"data: ") and b"\n" not in frame
        payload = frame.removeprefix(b"data: ")
        events.append(payload.decode() if payload == b"[DONE]" else json.loads(payload))
    return events


def scrape(engine: SimEngine) -> dict[str, float]:
    """The engine's samples by name and their labels besides engine="0" and model_name (`m{source="x"}`)."""
    samples = {}
    for family in text_string_to_metric_families(httpx.get(f"{engine.base_url}/metrics").text):
        for sample in family.samples:
            labels = dict(sample.labels)
            assert (labels.pop("engine"), labels.pop("model_name")) == ("0", "sim-model"), sample
            extra = ",".join(f'{key}="{value}"' for key, value in labels.items())
            samples[f"{sample.name}{{{extra}}}" if extra else sample.name] = sample.value
    return samples


def test_models_health_and_simulator_label(engine: SimEngine) -> None:
    models = httpx.get(f"{engine.base_url}/v1/models").json()
    assert [model["id"] for model in models["data"]] == ["sim-model"]
    assert models["data"][0]["owned_by"] == OWNED_BY == "motor-sim (simulator, not inference)"
    assert httpx.get(f"{engine.base_url}/health").status_code == 200
    assert "SIMULATOR" in engine.log_text()


@pytest.mark.parametrize("endpoint", ["completions", "chat/completions"])
def test_stream_and_non_stream_agree_with_the_oracle(engine: SimEngine, endpoint: str) -> None:
    fields = {"max_tokens": 12, "seed": 11, "temperature": 0.8, "return_token_ids": True, "ignore_eos": True}
    body = openai_body(endpoint, PROMPT, system="be terse", **fields)
    url = f"{engine.base_url}/v1/{endpoint}"
    whole = httpx.post(url, json=body, headers={"X-Request-Id": "req-1"})
    assert whole.status_code == 200 and whole.headers["x-request-id"] == "req-1"
    data = whole.json()
    choice = data["choices"][0]
    prompt_ids = choice["prompt_token_ids"] if endpoint == "completions" else data["prompt_token_ids"]
    assert choice["token_ids"] == expected_tokens(prompt_ids, max_tokens=12, seed=11, ignore_eos=True)
    text = choice["text"] if endpoint == "completions" else choice["message"]["content"]
    assert text == decode(choice["token_ids"])
    assert data["id"] == ("cmpl-req-1" if endpoint == "completions" else "chatcmpl-req-1")
    assert data["usage"]["prompt_tokens"] == len(prompt_ids) and data["usage"]["completion_tokens"] == 12
    assert choice["finish_reason"] == "length"

    streamed = httpx.post(
        url,
        json={**body, "stream": True, "stream_options": {"include_usage": True}},
        headers={"X-Request-Id": "req-2"},
    )
    assert streamed.headers["content-type"].startswith("text/event-stream")
    events = sse_events(streamed.content)
    assert events[-1] == "[DONE]"
    usage_chunk = events[-2]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == 12
    token_chunks = [event for event in events[:-2] if "token_ids" in event["choices"][0]]
    assert [chunk["choices"][0]["token_ids"][0] for chunk in token_chunks] == choice["token_ids"]
    assert [chunk["choices"][0]["finish_reason"] for chunk in token_chunks] == [None] * 11 + ["length"]
    assert all(event["id"].endswith("-req-2") for event in events[:-1])
    if endpoint == "chat/completions":
        assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        assert events[0]["prompt_token_ids"] == prompt_ids
        assert "".join(chunk["choices"][0]["delta"]["content"] for chunk in token_chunks) == text
    else:
        assert token_chunks[0]["choices"][0]["prompt_token_ids"] == prompt_ids
        assert "".join(chunk["choices"][0]["text"] for chunk in token_chunks) == text

    without_usage = sse_events(httpx.post(url, json={**body, "stream": True}).content)
    assert all("usage" not in event for event in without_usage[:-1])


def test_greedy_ignores_the_seed_and_eos_stops(engine: SimEngine) -> None:
    url = f"{engine.base_url}/v1/completions"
    greedy = [
        httpx.post(
            url,
            json={
                "prompt": PROMPT,
                "max_tokens": 5,
                "temperature": 0,
                "seed": seed,
                "return_token_ids": True,
            },
        ).json()
        for seed in (1, 2)
    ]
    assert greedy[0]["choices"][0]["token_ids"] == greedy[1]["choices"][0]["token_ids"]

    prompt_ids = greedy[0]["choices"][0]["prompt_token_ids"]
    seed = next(
        s
        for s in range(200_000)
        if expected_tokens(prompt_ids, max_tokens=3, seed=s)[-1:] == [EOS_ID]
        and len(expected_tokens(prompt_ids, max_tokens=3, seed=s)) == 3
    )
    body = {"prompt": prompt_ids, "max_tokens": 6, "seed": seed, "temperature": 1.0, "return_token_ids": True}
    stopped = httpx.post(url, json=body).json()["choices"][0]
    assert (
        stopped["finish_reason"] == "stop"
        and stopped["token_ids"][-1] == EOS_ID
        and len(stopped["token_ids"]) == 3
    )
    ignored = httpx.post(url, json={**body, "ignore_eos": True}).json()["choices"][0]
    assert ignored["finish_reason"] == "length" and len(ignored["token_ids"]) == 6
    masked = httpx.post(url, json={**body, "min_tokens": 5}).json()["choices"][0]
    assert EOS_ID not in masked["token_ids"][:5]


@pytest.mark.parametrize(
    ("path", "content", "status", "fragment"),
    [
        ("/v1/completions", b"{not json", 400, "not valid JSON"),
        ("/v1/completions", b"{}", 400, "prompt is required"),
        ("/v1/chat/completions", b'{"messages": "hi"}', 400, "messages"),
        ("/v1/completions", b'{"prompt": "a", "model": "other"}', 404, "does not exist"),
        ("/v1/embeddings", b"{}", 404, "no route"),
    ],
)
def test_bad_requests_get_openai_error_bodies(
    engine: SimEngine, path: str, content: bytes, status: int, fragment: str
) -> None:
    response = httpx.post(f"{engine.base_url}{path}", content=content)
    assert response.status_code == status
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == status and fragment in error["message"]
    assert httpx.get(f"{engine.base_url}/v1/completions").status_code == 405


def test_metrics_use_vllm_names_and_count(engine: SimEngine) -> None:
    for _ in range(2):
        httpx.post(f"{engine.base_url}/v1/completions", json={"prompt": PROMPT, "max_tokens": 4})
    prompt_len = len(
        httpx.post(
            f"{engine.base_url}/v1/completions",
            json={"prompt": PROMPT, "max_tokens": 1, "return_token_ids": True},
        ).json()["choices"][0]["prompt_token_ids"]
    )
    samples = scrape(engine)
    assert samples["vllm:prompt_tokens_total"] == 3 * prompt_len
    assert samples["vllm:generation_tokens_total"] == 9
    assert samples['vllm:request_success_total{finished_reason="length"}'] == 3
    assert samples['vllm:prompt_tokens_by_source_total{source="local_cache_hit"}'] == 2 * 16
    assert samples["vllm:prefix_cache_hits_total"] == 2 * 16
    assert samples["vllm:num_requests_running"] == 0 and samples["vllm:num_requests_waiting"] == 0
    for name in (
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries_total",
        "vllm:external_prefix_cache_queries_total",
        "vllm:external_prefix_cache_hits_total",
    ):
        assert name in samples


def test_client_disconnect_aborts_and_frees_the_batch_slot(sim_engines: StartSimEngine) -> None:
    engine = sim_engines(extra_args=["--max-batch", "1", "--itl-ms", "20"])
    url = f"{engine.base_url}/v1/completions"
    with (
        httpx.Client(timeout=10) as client,
        client.stream("POST", url, json={"prompt": PROMPT, "max_tokens": 5000, "stream": True}) as response,
    ):
        assert response.status_code == 200
        chunks = response.iter_raw()  # kept referenced: a collected iterator closes the response
        assert next(chunks).startswith(b"data: ")
        assert scrape(engine)["vllm:num_requests_running"] == 1
    deadline = time.monotonic() + 5
    while scrape(engine)['vllm:request_success_total{finished_reason="abort"}'] != 1:
        assert time.monotonic() < deadline, "the engine did not notice the disconnect"
        time.sleep(0.02)
    samples = scrape(engine)
    assert samples["vllm:num_requests_running"] == 0
    assert samples["vllm:generation_tokens_total"] < 5000
    done = httpx.post(url, json={"prompt": PROMPT, "max_tokens": 2}, timeout=10)
    assert done.status_code == 200 and done.json()["choices"][0]["finish_reason"] == "length"
