"""The encode leg's pure parts: image sizes from data URL headers, multimodal items, the E load score, the body."""

import base64
import json
import math
import struct

import pytest

from motor.coordinator.api.anthropic import to_chat
from motor.coordinator.client_request import parse_request
from motor.coordinator.dispatch.shaping import encode_body
from motor.coordinator.encode.image_size import HEAD_BYTES, JPEG_SCAN_BYTES, data_url_size, image_size
from motor.coordinator.encode.media import MediaItem, media_items
from motor.coordinator.encode.score import (
    MAX_SIDE,
    UNKNOWN_IMAGE_SCORE,
    VIDEO_SCORE,
    EncodeWork,
    encode_work,
    item_score,
)


def png(width: int, height: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr + b"\0\0\0\0" + b"\0" * 40


def gif(width: int, height: int, version: bytes = b"89a") -> bytes:
    return b"GIF" + version + struct.pack("<HH", width, height) + b"\xf7\0\0" + b"\0" * 20


def webp(chunk: bytes, payload: bytes) -> bytes:
    body = b"WEBP" + chunk + struct.pack("<I", len(payload)) + payload
    return b"RIFF" + struct.pack("<I", len(body)) + body


def vp8(width: int, height: int) -> bytes:
    return webp(b"VP8 ", b"\x10\x02\x00" + b"\x9d\x01\x2a" + struct.pack("<HH", width, height) + b"\0" * 8)


def vp8l(width: int, height: int) -> bytes:
    bits = (width - 1) | ((height - 1) << 14)
    return webp(b"VP8L", b"\x2f" + struct.pack("<I", bits) + b"\0" * 8)


def vp8x(width: int, height: int) -> bytes:
    return webp(
        b"VP8X", b"\x10\0\0\0" + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    )


def segment(marker: int, payload: bytes) -> bytes:
    return bytes([0xFF, marker]) + struct.pack(">H", len(payload) + 2) + payload


def jpeg(width: int, height: int, *, sof: int = 0xC0, before: bytes = b"") -> bytes:
    frame = segment(sof, b"\x08" + struct.pack(">HH", height, width) + b"\x03" + b"\x01\x22\x00" * 3)
    return b"\xff\xd8" + before + frame + segment(0xDA, b"\0" * 10) + b"\0" * 64 + b"\xff\xd9"


def app(size: int) -> bytes:
    """An APPn segment of `size` bytes in all (EXIF/ICC data before the frame header)."""
    return segment(0xE1, b"\0" * (size - 4))


def data_url(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64," + base64.b64encode(data).decode()


@pytest.mark.parametrize(
    ("data", "size"),
    [
        (png(640, 480), (640, 480)),
        (gif(33, 7), (33, 7)),
        (gif(100, 200, b"87a"), (100, 200)),
        (vp8(300, 150), (300, 150)),
        (vp8l(1, 16384), (1, 16384)),
        (vp8x(4000, 3000), (4000, 3000)),
        (jpeg(1920, 1080), (1920, 1080)),
        (jpeg(800, 600, sof=0xC2), (800, 600)),  # progressive
        (jpeg(50, 60, sof=0xC1, before=app(100) + segment(0xDB, b"\0" * 65)), (50, 60)),
        (b"\xff\xd8\xff\xff\xff" + jpeg(12, 34)[3:], (12, 34)),  # fill bytes before a marker
        (jpeg(10, 20, before=b"\xff\xd0"), (10, 20)),  # a stand-alone marker
    ],
)
def test_the_header_of_each_format_gives_its_size(data: bytes, size: tuple[int, int]) -> None:
    assert image_size(data) == size
    assert data_url_size(data_url(data)) == size


@pytest.mark.parametrize(
    "data",
    [
        png(640, 480)[:20],  # truncated IHDR
        png(640, 480)[:12] + b"IDAT" + png(640, 480)[16:],  # first chunk is not IHDR
        png(0, 480),  # zero width
        gif(33, 7)[:8],
        vp8(300, 150)[:26],
        vp8(300, 150)[:23] + b"\0\0\0" + vp8(300, 150)[26:],  # no key frame start code
        vp8l(10, 10)[:20] + b"\0" + vp8l(10, 10)[21:],  # bad VP8L signature
        vp8x(10, 10)[:28],
        webp(b"ALPH", b"\0" * 20),  # not an image chunk first
        jpeg(64, 64)[:9],  # truncated in the frame header
        b"\xff\xd8" + segment(0xDA, b"\0" * 10) + jpeg(64, 64)[2:],  # scan before frame: malformed
        b"\xff\xd8\x00\x00" + jpeg(64, 64)[2:],  # not a marker where one must be
        b"\xff\xd8\xff\xe1\x00\x01" + b"\0" * 40,  # segment length below 2
        b"BM" + b"\0" * 60,  # BMP: not a format read here
        b"",
    ],
)
def test_truncated_malformed_or_unknown_headers_have_no_size(data: bytes) -> None:
    assert image_size(data) is None
    assert data_url_size(data_url(data)) is None


def test_a_jpeg_frame_header_after_big_segments_is_found_within_the_bounded_scan() -> None:
    late = jpeg(300, 200, before=app(HEAD_BYTES * 4))
    assert image_size(late[:HEAD_BYTES]) is None, "not in the first look"
    assert data_url_size(data_url(late, "image/jpeg")) == (300, 200)
    beyond = jpeg(300, 200, before=app(60000) + app(10000))
    assert data_url_size(data_url(beyond, "image/jpeg")) is None, f"past {JPEG_SCAN_BYTES} bytes: unknown"


@pytest.mark.parametrize(
    "url",
    [
        "https://example.com/cat.png",
        "data:image/png," + "%89PNG",  # not base64
        "data:image/png;base64,!!!!****",
        "data:image/png;base64,iVBORw0KGgo",  # base64 of a bare signature: no IHDR
        "data:image/png;base64,\u00e9\u00e9\u00e9\u00e9",  # not ASCII
        "data:image/png;base64",  # no payload at all
        "data:" + "x" * 300 + ";base64," + base64.b64encode(png(8, 8)).decode(),  # header beyond the bound
        "data:;base64,",
    ],
)
def test_urls_that_cannot_be_read_have_no_size(url: str) -> None:
    assert data_url_size(url) is None


def test_line_breaks_and_url_safe_letters_in_the_payload_are_tolerated() -> None:
    encoded = base64.b64encode(png(640, 480)).decode()
    wrapped = "\n".join(encoded[i : i + 16] for i in range(0, len(encoded), 16))
    assert data_url_size("data:image/png;base64," + wrapped) == (640, 480)
    urlsafe = base64.urlsafe_b64encode(vp8x(4000, 3000)).decode()
    assert data_url_size("data:image/webp;base64," + urlsafe) == (4000, 3000)


def test_only_the_head_of_a_large_payload_is_decoded() -> None:
    url = data_url(png(64, 64) + b"\0" * 4_000_000)
    assert data_url_size(url + "not base64 at all") == (64, 64)


def test_media_items_are_the_image_and_video_parts_in_prompt_order() -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "compare"},
                {"type": "image_url", "image_url": {"url": "https://a/1.png", "detail": "low"}},
                {"type": "video_url", "video_url": "https://a/v.mp4"},
                {"type": "input_image", "image_url": "https://a/ignored.png"},
                "not a part",
            ],
        },
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": ""}}, {"type": "image_url"}]},
        "not a message",
    ]
    assert media_items(messages) == [
        MediaItem("image", "https://a/1.png"),
        MediaItem("video", "https://a/v.mp4"),
        MediaItem("image", None),
        MediaItem("image", None),
    ]
    assert media_items([{"role": "user", "content": "text"}]) == []
    assert media_items(None) == []


@pytest.mark.parametrize(
    ("item", "score"),
    [
        (MediaItem("image", data_url(png(640, 480))), 20 * 15),
        (MediaItem("image", data_url(png(33, 1))), 2 * 1),
        (MediaItem("image", data_url(jpeg(1920, 1080), "image/jpeg")), 60 * math.ceil(1080 / 32)),
        (MediaItem("image", data_url(png(2**31 - 1, 10))), (MAX_SIDE // 32) * 1),  # a lying header is capped
        (MediaItem("image", "https://example.com/a.png"), UNKNOWN_IMAGE_SCORE),
        (MediaItem("image", "data:image/png;base64,@@@@"), UNKNOWN_IMAGE_SCORE),
        (MediaItem("image", None), UNKNOWN_IMAGE_SCORE),
        (MediaItem("video", data_url(b"\0\0\0\x18ftypmp42", "video/mp4")), VIDEO_SCORE),
        (MediaItem("video", "https://example.com/v.mp4"), VIDEO_SCORE),
    ],
)
def test_item_scores(item: MediaItem, score: int) -> None:
    assert item_score(item) == score


def test_the_request_score_is_the_sum_over_its_items() -> None:
    parts = [
        {"type": "image_url", "image_url": {"url": data_url(png(64, 64))}},
        {"type": "image_url", "image_url": {"url": "http://example.com/x.jpg"}},
        {"type": "video_url", "video_url": {"url": "http://example.com/v.mp4"}},
    ]
    work = encode_work([{"role": "user", "content": [{"type": "text", "text": "hi"}, *parts]}])
    assert work is not None and len(work.items) == 3
    assert work.score == 4 + UNKNOWN_IMAGE_SCORE + VIDEO_SCORE
    assert encode_work([{"role": "user", "content": [{"type": "text", "text": "hi"}]}]) is None


def test_chat_requests_carry_their_encode_work_and_completions_none() -> None:
    image = {"type": "image_url", "image_url": {"url": "http://example.com/x.jpg"}}
    chat = {"model": "m", "messages": [{"role": "user", "content": [image]}]}
    parsed = parse_request("chat", json.dumps(chat).encode(), {"m"})
    assert parsed.encode == EncodeWork((MediaItem("image", "http://example.com/x.jpg"),), UNKNOWN_IMAGE_SCORE)
    text = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
    assert parse_request("chat", json.dumps(text).encode(), {"m"}).encode is None
    completion = {"model": "m", "prompt": "hello"}
    assert parse_request("completions", json.dumps(completion).encode(), {"m"}).encode is None


def test_an_anthropic_image_block_becomes_encode_work_with_its_size() -> None:
    data = base64.b64encode(png(640, 480)).decode()
    block = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}
    messages = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": [block]}]}
    parsed = parse_request("chat", json.dumps(to_chat(messages)).encode(), {"m"})
    assert parsed.encode is not None and parsed.encode.score == 20 * 15  # ceil(640/32) x ceil(480/32)


def test_the_encode_body_asks_for_one_token_not_streamed() -> None:
    client = {
        "model": "m",
        "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": "http://a/b.png"}]}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 100,
        "temperature": 0.5,
    }
    original = json.dumps(client)
    body = json.loads(encode_body(client))
    assert body == {
        "model": "m",
        "messages": client["messages"],
        "stream": False,
        "max_tokens": 1,
        "min_tokens": 1,
        "max_completion_tokens": 1,
        "temperature": 0.5,
    }
    assert json.dumps(client) == original, "the client's body is left as it was"
