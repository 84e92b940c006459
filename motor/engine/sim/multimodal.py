"""Multimodal items of chat requests: the `image_url` / `video_url` content parts, their hash and prompt tokens.

An item is identified as the EPD contract says: mm_hash = sha256 of the part's URL string (utf-8), hex. The URL is
never fetched or decoded; each item stands for a fixed `MM_TOKENS_PER_ITEM` prompt tokens.
"""

import hashlib
from dataclasses import dataclass
from typing import Any, Literal

from motor.engine.sim.errors import bad_request
from motor.tokenize.sim_vocab import FIRST_WORD_ID, VOCAB_SIZE

Modality = Literal["image", "video"]
MODALITIES: dict[str, Modality] = {"image_url": "image", "video_url": "video"}
# Prompt tokens per image or video: a 448x448 image as 14-px patches merged 2x2 (e.g. Qwen2-VL) is 256, small
# vision models use 64-576; 64 keeps test prompts short while still dominating a short caption.
MM_TOKENS_PER_ITEM = 64


@dataclass(frozen=True)
class MmItem:
    modality: Modality
    url: str
    mm_hash: str

    def placeholder_ids(self) -> list[int]:
        """The item's prompt tokens. They are drawn from its hash so that two images give two prompts: vLLM
        reaches the same by keying its prefix-cache blocks with the mm hash, the simulator keys by token ids."""
        stream = hashlib.shake_128(self.mm_hash.encode()).digest(2 * MM_TOKENS_PER_ITEM)
        words = VOCAB_SIZE - FIRST_WORD_ID
        return [
            FIRST_WORD_ID + int.from_bytes(stream[i : i + 2], "little") % words
            for i in range(0, len(stream), 2)
        ]


def mm_hash(url: str) -> str:
    return hashlib.sha256(url.encode("utf-8")).hexdigest()


def mm_item(part: dict[str, Any], where: str) -> MmItem:
    """The item of an `image_url` / `video_url` part: `{"type": "image_url", "image_url": {"url": U}}`, or
    `"image_url": U` (a plain string); 400 naming `where` when the URL is missing or empty."""
    kind = part["type"]
    value = part.get(kind)
    url = value.get("url") if isinstance(value, dict) else value
    if not isinstance(url, str) or not url:
        raise bad_request(f"{where}.{kind}.url must be a non-empty string", param="messages")
    return MmItem(MODALITIES[kind], url, mm_hash(url))
