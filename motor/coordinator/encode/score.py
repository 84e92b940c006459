"""The E load score of a request (pyMotor's): Σ ⌈h/32⌉·⌈w/32⌉ over its images, a fixed score per video and
per image whose size is not known without fetching or decoding it (a remote URL, an unreadable data URL)."""

import math
from dataclasses import dataclass
from typing import Any

from motor.coordinator.encode.image_size import data_url_size
from motor.coordinator.encode.media import MediaItem, media_items

PATCH = 32
VIDEO_SCORE = 32
UNKNOWN_IMAGE_SCORE = 16 * 16  # a 512x512 image
# Headers may state any size up to 2^31; engines' image loaders refuse images far below this side (PIL's
# decompression-bomb bound is ~179 MP), so a lying header cannot make one request outweigh a whole instance.
MAX_SIDE = 16384


@dataclass(frozen=True, slots=True)
class EncodeWork:
    """What a request asks of an encode instance: its multimodal items and their load score."""

    items: tuple[MediaItem, ...]
    score: int


def item_score(item: MediaItem) -> int:
    if item.modality == "video":
        return VIDEO_SCORE
    size = data_url_size(item.url) if item.url is not None else None
    if size is None:
        return UNKNOWN_IMAGE_SCORE
    width, height = (min(side, MAX_SIDE) for side in size)
    return math.ceil(height / PATCH) * math.ceil(width / PATCH)


def encode_work(messages: Any) -> EncodeWork | None:
    """The encode work of a chat request's messages; None for a text-only request."""
    items = media_items(messages)
    if not items:
        return None
    return EncodeWork(tuple(items), sum(item_score(item) for item in items))
