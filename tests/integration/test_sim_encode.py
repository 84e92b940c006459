"""EPD's encode side on real simulator processes (no pool): an ec_producer (encode instance) writes each image's
encoder output to the shared storage, an ec_consumer (prefill) answers only when every one is there, and an engine
without --ec-transfer-config encodes its images itself."""

import hashlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from motor.engine.sim.multimodal import MM_TOKENS_PER_ITEM
from tests.fixtures.sim import SimEngine, StartSimEngine, fresh_prompt, start_ready_together

LABELS = 'engine="0",model_name="sim-model"'


@dataclass
class Epd:
    encode: SimEngine
    prefill: SimEngine
    plain: SimEngine  # no --ec-transfer-config
    storage: Path
    http: httpx.AsyncClient

    async def chat(self, engine: SimEngine, body: dict[str, Any]) -> httpx.Response:
        return await self.http.post(f"{engine.base_url}/v1/chat/completions", json=body)

    async def metric(self, engine: SimEngine, name: str) -> float:
        for line in (await self.http.get(f"{engine.base_url}/metrics")).text.splitlines():
            if line.startswith(f"{name}{{{LABELS}}} "):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"{name} not exported")

    async def ec_counts(self, engine: SimEngine) -> tuple[float, float, float]:
        names = ("motor_sim_ec_saved_total", "motor_sim_ec_loaded_total", "motor_sim_ec_missing_total")
        return tuple([await self.metric(engine, name) for name in names])  # type: ignore[return-value]


def ec_config(role: str, storage: Path) -> list[str]:
    config = {
        "ec_connector": "ECExampleConnector",
        "ec_role": role,
        "ec_connector_extra_config": {"shared_storage_path": str(storage)},
    }
    return ["--ec-transfer-config", json.dumps(config)]


@pytest.fixture
async def epd(sim_engines: StartSimEngine, tmp_path: Path) -> AsyncIterator[Epd]:
    storage = tmp_path / "ec-cache"
    engines = start_ready_together(
        sim_engines,
        {"engine_id": "encode-0", "extra_args": ec_config("ec_producer", storage)},
        {"kv_role": "kv_producer", "engine_id": "prefill-0", "extra_args": ec_config("ec_consumer", storage)},
        {"engine_id": "plain-0"},
    )
    async with httpx.AsyncClient(timeout=30) as http:
        yield Epd(*engines, storage, http)


def image_body(urls: list[str], prompt: str, **fields: Any) -> dict[str, Any]:
    parts = [{"type": "image_url", "image_url": {"url": url}} for url in urls]
    content = [{"type": "text", "text": prompt}, *parts]
    return {"messages": [{"role": "user", "content": content}], "temperature": 0, **fields}


def encode_leg(body: dict[str, Any]) -> dict[str, Any]:
    """What the coordinator sends the encode instance (the EPD contract)."""
    return {**body, "stream": False, "max_tokens": 1, "min_tokens": 1, "max_completion_tokens": 1}


def sha256(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()


async def test_encode_then_prefill_through_the_shared_storage(epd: Epd) -> None:
    urls = ["data:image/png;base64,iVBORw0KGgoAAAANSUhEUg==", f"http://127.0.0.1/{fresh_prompt(1)}.jpg"]
    body = image_body(urls, fresh_prompt(8), max_tokens=6)

    encoded = await epd.chat(epd.encode, encode_leg(body))
    assert encoded.status_code == 200, encoded.text
    assert len(encoded.json()["choices"][0]["message"]["content"].split()) == 1
    assert sorted(path.name for path in epd.storage.iterdir()) == sorted(f"{sha256(url)}.emb" for url in urls)
    assert json.loads((epd.storage / f"{sha256(urls[0])}.emb").read_text())["mm_hash"] == sha256(urls[0])
    assert await epd.ec_counts(epd.encode) == (2, 0, 0)

    prefilled = await epd.chat(epd.prefill, body)
    assert prefilled.status_code == 200, prefilled.text
    assert await epd.ec_counts(epd.prefill) == (0, 2, 0)

    # without a connector the images are encoded locally: same prompt, same tokens, no files
    local = await epd.chat(epd.plain, body)
    assert local.status_code == 200, local.text
    assert local.json()["choices"] == prefilled.json()["choices"]
    assert local.json()["usage"]["prompt_tokens"] == prefilled.json()["usage"]["prompt_tokens"]
    assert await epd.ec_counts(epd.plain) == (0, 0, 0)
    assert len(list(epd.storage.iterdir())) == 2

    words_only = {**body, "messages": [{"role": "user", "content": body["messages"][0]["content"][:1]}]}
    text = await epd.chat(epd.plain, words_only)
    assert (
        text.json()["usage"]["prompt_tokens"] + 2 * MM_TOKENS_PER_ITEM
        == local.json()["usage"]["prompt_tokens"]
    )


async def test_the_prefill_fails_loudly_when_no_encode_instance_ran_an_image(epd: Epd) -> None:
    encoded_url = f"http://127.0.0.1/{fresh_prompt(1)}.png"
    missing_url = f"http://127.0.0.1/{fresh_prompt(1)}.png"
    assert (await epd.chat(epd.encode, encode_leg(image_body([encoded_url], "x")))).status_code == 200

    response = await epd.chat(epd.prefill, image_body([encoded_url, missing_url], fresh_prompt(4)))
    assert response.status_code == 500
    error = response.json()["error"]
    assert error["type"] == "InternalServerError" and error["code"] == 500
    assert sha256(missing_url) in error["message"]
    assert str(epd.storage / f"{sha256(missing_url)}.emb") in error["message"]
    assert "no encode instance ran it" in error["message"]
    assert await epd.ec_counts(epd.prefill) == (0, 0, 1)
    assert not (epd.storage / f"{sha256(missing_url)}.emb").exists()


async def test_text_only_requests_skip_the_handover(epd: Epd) -> None:
    body = {"messages": [{"role": "user", "content": fresh_prompt(10)}], "max_tokens": 3, "temperature": 0}
    answers = []
    for engine in (epd.encode, epd.prefill, epd.plain):
        response = await epd.chat(engine, body)
        assert response.status_code == 200, response.text
        answers.append(response.json()["choices"])
        assert await epd.ec_counts(engine) == (0, 0, 0)
    assert answers[0] == answers[1] == answers[2]
    assert not epd.storage.exists()  # nothing was ever written
