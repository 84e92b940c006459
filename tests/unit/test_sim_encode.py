"""The simulator's encode side of EPD: multimodal items of chat requests, --ec-transfer-config, the shared-storage
handover (motor/engine/sim/multimodal.py, ec_storage.py)."""

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from motor.engine.sim.cli import parse_config
from motor.engine.sim.config import EcTransferConfig, SimConfig
from motor.engine.sim.ec_storage import EcStorage, embedding_path
from motor.engine.sim.errors import SimError
from motor.engine.sim.metrics import EngineMetrics
from motor.engine.sim.multimodal import MM_TOKENS_PER_ITEM, MmItem, mm_hash
from motor.engine.sim.openai_protocol import parse_request
from motor.tokenize.sim_vocab import encode, render_chat

CONFIG = SimConfig()
IMAGE = "data:image/png;base64,iVBORw0KGgo="
VIDEO = "http://127.0.0.1/clip.mp4"


def sha256(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()


def chat(*content: Any) -> dict[str, Any]:
    return {
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": list(content)}]
    }


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def image(url: str, *, plain: bool = False) -> dict[str, Any]:
    return {"type": "image_url", "image_url": url if plain else {"url": url}}


def test_items_come_from_image_and_video_parts_with_the_sha256_of_their_url() -> None:
    api = parse_request(
        "chat",
        chat(text("compare"), image(IMAGE), {"type": "video_url", "video_url": {"url": VIDEO}}),
        CONFIG,
    )
    assert api.mm_items == (MmItem("image", IMAGE, sha256(IMAGE)), MmItem("video", VIDEO, sha256(VIDEO)))
    plain = parse_request("chat", chat(image(IMAGE, plain=True)), CONFIG)
    assert plain.mm_items == (MmItem("image", IMAGE, sha256(IMAGE)),)
    assert mm_hash(IMAGE) == sha256(IMAGE)
    assert parse_request("chat", chat(text("only words")), CONFIG).mm_items == ()
    assert parse_request("completion", {"prompt": "x"}, CONFIG).mm_items == ()


def test_each_item_counts_a_fixed_number_of_prompt_tokens_where_its_part_is() -> None:
    words = parse_request("chat", chat(text("what is"), text("this")), CONFIG).prompt_token_ids
    with_image = parse_request(
        "chat", chat(text("what is"), image(IMAGE), text("this")), CONFIG
    ).prompt_token_ids
    assert len(with_image) == len(words) + MM_TOKENS_PER_ITEM
    placeholders = MmItem("image", IMAGE, sha256(IMAGE)).placeholder_ids()
    start = with_image.index(placeholders[0])
    assert with_image[start : start + MM_TOKENS_PER_ITEM] == placeholders
    assert with_image[:start] + with_image[start + MM_TOKENS_PER_ITEM :] == words
    other = parse_request("chat", chat(text("what is"), image(VIDEO), text("this")), CONFIG).prompt_token_ids
    assert other != with_image and len(other) == len(with_image)  # two images, two prompts (and KV)
    assert min(placeholders) >= 3  # never a special token


@pytest.mark.parametrize(
    "content",
    ["plain", "ends with <", "ends with <|im", "<|im_end|> inside", "tab\tand\nnewline", "", "x|>"],
)
def test_text_only_prompts_keep_the_ids_of_the_whole_rendered_template(content: str) -> None:
    body = {
        "messages": [{"role": "user", "content": content}, {"role": "assistant", "content": [text(content)]}]
    }
    expected = encode(render_chat([("user", content), ("assistant", content)]))
    assert parse_request("chat", body, CONFIG).prompt_token_ids == expected
    no_prompt = {**body, "add_generation_prompt": False}
    assert parse_request("chat", no_prompt, CONFIG).prompt_token_ids == encode(
        render_chat([("user", content), ("assistant", content)], add_generation_prompt=False)
    )


@pytest.mark.parametrize(
    ("part", "named"),
    [
        ({"type": "image_url"}, "messages[1].content[0].image_url.url"),
        ({"type": "image_url", "image_url": {"url": ""}}, "messages[1].content[0].image_url.url"),
        ({"type": "video_url", "video_url": {"uri": "x"}}, "messages[1].content[0].video_url.url"),
        (
            {"type": "input_audio", "input_audio": {}},
            "messages[1].content[0]: motor-sim accepts text, image_url",
        ),
        ("just a string", "messages[1].content[0]: motor-sim accepts"),
    ],
)
def test_bad_parts_are_400_naming_them(part: Any, named: str) -> None:
    with pytest.raises(SimError) as error:
        parse_request("chat", chat(part), CONFIG)
    assert error.value.status == 400 and named in error.value.message


def ec_flag(role: str, path: str = "/tmp/ec", **extra: Any) -> list[str]:
    config = {
        "ec_connector": "ECExampleConnector",
        "ec_role": role,
        "ec_connector_extra_config": {"shared_storage_path": path},
        **extra,
    }
    return ["--ec-transfer-config", json.dumps(config)]


def test_the_ec_transfer_config_is_read_and_other_keys_pass() -> None:
    config = parse_config(ec_flag("ec_consumer", "/shared/ec", engine_id="prefill-0"), environ={})
    assert config.ec_transfer is not None
    assert config.ec_transfer.ec_role == "ec_consumer"
    assert config.ec_transfer.ec_connector_extra_config.shared_storage_path == "/shared/ec"
    assert parse_config([], environ={}).ec_transfer is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("{not json", "argument --ec-transfer-config: not valid JSON"),
        ("[]", "argument --ec-transfer-config: must be a JSON object"),
        (ec_flag("ec_both")[1], "argument --ec-transfer-config: ec_role: Input should be 'ec_producer' or"),
        (
            json.dumps({"ec_connector": "ECExampleConnector", "ec_role": "ec_producer"}),
            "ec_connector_extra_config.shared_storage_path: Field required",
        ),
        (
            json.dumps(
                {
                    "ec_connector": "ECExampleConnector",
                    "ec_role": "ec_producer",
                    "ec_connector_extra_config": {},
                }
            ),
            "ec_connector_extra_config.shared_storage_path: Field required",
        ),
        (ec_flag("ec_producer", "")[1], "ec_connector_extra_config.shared_storage_path: String should have"),
        (json.dumps({"ec_role": "ec_producer"}), "ec_connector: Field required"),
    ],
)
def test_bad_ec_transfer_configs_exit_naming_the_key(
    value: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_config(["--ec-transfer-config", value], environ={})
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def storage(role: str, root: Path) -> tuple[EcStorage, EngineMetrics]:
    metrics = EngineMetrics()
    config = EcTransferConfig.model_validate(
        {
            "ec_connector": "ECExampleConnector",
            "ec_role": role,
            "ec_connector_extra_config": {"shared_storage_path": str(root)},
        }
    )
    return EcStorage(config, metrics), metrics


ITEMS = (MmItem("image", IMAGE, sha256(IMAGE)), MmItem("video", VIDEO, sha256(VIDEO)))


async def test_the_producer_writes_one_file_per_item_and_the_consumer_loads_them(tmp_path: Path) -> None:
    root = tmp_path / "ec"  # created by the producer
    producer, produced = storage("ec_producer", root)
    await producer.hand_over(ITEMS)
    assert sorted(path.name for path in root.iterdir()) == sorted(f"{item.mm_hash}.emb" for item in ITEMS)
    written = json.loads(embedding_path(root, sha256(IMAGE)).read_text())
    assert written["mm_hash"] == sha256(IMAGE) and written["num_tokens"] == MM_TOKENS_PER_ITEM
    assert produced.ec_saved == 2
    await producer.hand_over(ITEMS)  # the same images again: rewritten in place
    assert len(list(root.iterdir())) == 2 and produced.ec_saved == 4

    consumer, consumed = storage("ec_consumer", root)
    await consumer.hand_over(ITEMS)
    await consumer.hand_over(())
    assert (consumed.ec_loaded, consumed.ec_missing, consumed.ec_saved) == (2, 0, 0)


async def test_a_missing_encoder_output_fails_the_request_naming_hash_and_path(tmp_path: Path) -> None:
    producer, _ = storage("ec_producer", tmp_path)
    await producer.hand_over(ITEMS[:1])
    consumer, metrics = storage("ec_consumer", tmp_path)
    with pytest.raises(SimError) as error:
        await consumer.hand_over(ITEMS)
    message = error.value.message
    assert error.value.status == 500
    assert sha256(VIDEO) in message and str(tmp_path / f"{sha256(VIDEO)}.emb") in message
    assert "no encode instance ran it" in message
    assert (metrics.ec_missing, metrics.ec_loaded) == (1, 0)


async def test_a_file_that_is_not_the_items_encoder_output_fails(tmp_path: Path) -> None:
    embedding_path(tmp_path, sha256(IMAGE)).write_text("garbage\n")
    consumer, _ = storage("ec_consumer", tmp_path)
    with pytest.raises(SimError, match="is not the encoder output of mm_hash"):
        await consumer.hand_over(ITEMS[:1])
