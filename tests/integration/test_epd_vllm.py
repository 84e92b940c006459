"""Encoder disaggregation (EPD) on the real engine: a copy of examples/local-epd (1 encode, 1 prefill and 1 decode
vLLM CPU engine on the tiny random-weight BLIP-2 of `motor model tiny --multimodal`) deployed by `motor deploy`
and served through the coordinator.

The encode engine (ECExampleConnector, ec_producer: encode-only) writes each image's encoder output to
`<shared_storage_path>/<mm_hash>/encoder_cache.safetensors`; the prefill engine (ec_consumer) loads it instead of
running its encoder (vLLM logs that at DEBUG, which env.json turns on for the prefill engine only) and hands the
prompt's KV to the decode engine through the example's MultiConnector[MooncakeConnector, MooncakeStoreConnector].
"Aggregated" is the same request sent straight to the decode engine without kv_transfer_params: the decode engine
has no EC connector, so it runs the encoder and the whole prompt itself, with the same weights and kernels.

The module starts the 3 engines once (about 5 GiB: encode 1.4, prefill and decode 2.5 each; the module takes
about 2 minutes on 2 cores).
"""

import base64
import json
import random
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from motor.config import load_config
from motor.config.ports import instance_ports
from tests.fixtures.coordinator import metric_at
from tests.fixtures.kv_handover import assert_kv_handover, decode_counters
from tests.fixtures.local_example import build_tiny_model, deployed, write_local_epd_example
from tests.installs import needs_vllm

pytestmark = [pytest.mark.slow, needs_vllm]

MODEL_DIR = ".motor/models/tiny-mm"  # the example's (relative) model path
MODEL = "tiny-mm"
JOB_ID = "motor-epd-vllm"
REQUEST_TIMEOUT_S = 120.0
IMAGE_TOKENS = 8  # the tiny BLIP-2's num_query_tokens
ENCODE_DONE = 'motor_coordinator_encode_legs_total{outcome="done"}'
CACHE_FILE = "encoder_cache.safetensors"
TEXT = "Describe this picture of prefill and decode engines sharing one cache, in a few plain words please."


@dataclass
class Deployment:
    run_root: Path
    storage: Path  # the EC connector's shared_storage_path
    api_url: str
    mgmt_url: str
    engines: dict[str, str]  # instance id → engine base URL
    block_size: int
    image_requests: int = 0  # image requests sent through the coordinator so far
    seen: set[str] = field(default_factory=set)

    @property
    def decode(self) -> str:
        return self.engines["decode-0"]

    def engine_log(self, instance: str) -> str:
        return (self.run_root / JOB_ID / instance / "engine.log").read_text(errors="replace")

    def stored(self) -> set[str]:
        """The mm_hash directories the encode engine wrote so far."""
        return {p.name for p in self.storage.iterdir() if p.is_dir()} if self.storage.exists() else set()


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    root = tmp_path_factory.mktemp("epd-vllm")
    log_path = root / "motor-cli.log"
    build_tiny_model(root, MODEL_DIR, log_path, multimodal=True)
    storage = root / "ec-cache"
    config_dir = write_local_epd_example(root / "config", JOB_ID, storage)
    env_path = config_dir / "env.json"
    env = json.loads(env_path.read_text())
    env["motor_engine_prefill_env"]["VLLM_LOGGING_LEVEL"] = "DEBUG"  # for ECExampleConnector's load lines
    env_path.write_text(json.dumps(env, indent=2))
    topology = load_config(config_dir / "user_config.json", env_path)
    assert set(topology.roles) == {"encode", "prefill", "decode"}
    api = topology.user.motor_coordinator_config.api_config
    run_root = root / "run"
    deploy = Deployment(
        run_root=run_root,
        storage=storage,
        api_url=f"http://127.0.0.1:{api.coordinator_api_infer_port}",
        mgmt_url=f"http://127.0.0.1:{api.coordinator_api_mgmt_port}",
        engines={p.name: f"http://127.0.0.1:{p.engine_port}" for p in instance_ports(topology.roles)},
        block_size=int(topology.roles["decode"].engine_config["block_size"]),
    )
    with deployed(root, config_dir, run_root, JOB_ID, log_path):
        yield deploy


# ---- helpers ---------------------------------------------------------------------------------------------------


def noise_png(width: int, height: int, seed: int) -> str:
    """A data URL of a valid RGB PNG of random pixels drawn from `seed`."""
    rng = random.Random(seed)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + bytes(rng.randrange(256) for _ in range(3 * width)) for _ in range(height))
    body = chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
    body += chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
    return "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n" + body).decode()


def chat_body(content: Any, max_tokens: int = 12) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "return_token_ids": True,
    }


def image_body(seed: int) -> dict[str, Any]:
    return chat_body(
        [
            {"type": "image_url", "image_url": {"url": noise_png(64, 64, seed)}},
            {"type": "text", "text": TEXT},
        ]
    )


def chat(base_url: str, body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(f"{base_url}/v1/chat/completions", json=body, timeout=REQUEST_TIMEOUT_S)
    assert response.status_code == 200, f"{base_url}: {response.status_code} {response.text}"
    return response.json()


def token_ids(answer: dict[str, Any]) -> list[int]:
    ids = answer["choices"][0]["token_ids"]
    assert ids, answer
    return ids


# ---- tests -----------------------------------------------------------------------------------------------------


def test_an_image_is_encoded_once_on_the_encode_engine_and_loaded_by_the_prefill(
    deployment: Deployment,
) -> None:
    answers = []
    for seed in (1, 2):
        body = image_body(seed)
        aggregated = chat(deployment.decode, body)
        expected = token_ids(aggregated)
        assert deployment.stored() == deployment.seen, "the decode engine wrote an encoder file"
        legs_before = metric_at(deployment.mgmt_url, ENCODE_DONE)
        kv_before = decode_counters(deployment.decode)

        answer = chat(deployment.api_url, body)
        deployment.image_requests += 1

        prompt_tokens = answer["usage"]["prompt_tokens"]
        assert prompt_tokens == aggregated["usage"]["prompt_tokens"] > IMAGE_TOKENS + deployment.block_size
        assert token_ids(answer) == expected, "EPD greedy output differs from aggregated"
        assert answer["choices"][0]["message"]["content"] == aggregated["choices"][0]["message"]["content"]
        assert metric_at(deployment.mgmt_url, ENCODE_DONE) == legs_before + 1
        (mm_hash,) = deployment.stored() - deployment.seen  # the encode leg wrote exactly one new item
        deployment.seen.add(mm_hash)
        cache_file = deployment.storage / mm_hash / CACHE_FILE
        assert cache_file.is_file() and cache_file.stat().st_size > 0, sorted(cache_file.parent.iterdir())
        assert f"Success load encoder cache for hash {mm_hash}" in deployment.engine_log("prefill-0"), (
            f"the prefill engine did not load {mm_hash} from the shared storage"
        )
        assert_kv_handover(
            before=kv_before,
            after=decode_counters(deployment.decode),
            prompt_tokens=prompt_tokens,
            block_size=deployment.block_size,
        )
        answers.append(expected)
    assert answers[0] != answers[1], "the model ignores the image"
    assert metric_at(deployment.mgmt_url, ENCODE_DONE) == deployment.image_requests


def test_a_text_request_takes_no_encode_leg_and_writes_no_encoder_file(deployment: Deployment) -> None:
    body = chat_body(TEXT)
    expected = token_ids(chat(deployment.decode, body))
    stored_before = deployment.stored()
    legs_before = metric_at(deployment.mgmt_url, ENCODE_DONE)

    answer = chat(deployment.api_url, body)

    assert token_ids(answer) == expected, "PD greedy output differs from aggregated"
    assert deployment.stored() == stored_before, "a text request made an encoder file"
    assert metric_at(deployment.mgmt_url, ENCODE_DONE) == legs_before == deployment.image_requests


def test_a_streamed_image_request_streams_what_the_decode_engine_alone_answers(
    deployment: Deployment,
) -> None:
    body = image_body(3)
    expected = chat(deployment.decode, body)["choices"][0]["message"]["content"]
    legs_before = metric_at(deployment.mgmt_url, ENCODE_DONE)

    text, events, done = "", 0, False
    streamed = {**body, "stream": True}
    with httpx.stream(
        "POST", f"{deployment.api_url}/v1/chat/completions", json=streamed, timeout=REQUEST_TIMEOUT_S
    ) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                chunk = json.loads(line[6:])
                assert "error" not in chunk, chunk
                if chunk["choices"]:
                    text += chunk["choices"][0]["delta"].get("content") or ""
                events += 1
    deployment.image_requests += 1
    assert done and events > 1 and text == expected, (done, events, text, expected)
    assert metric_at(deployment.mgmt_url, ENCODE_DONE) == legs_before + 1
