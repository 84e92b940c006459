"""The multimodal items of a chat request: its `image_url` / `video_url` content parts, in prompt order.

A part is `{"type": "image_url", "image_url": {"url": U}}` or `{"type": "image_url", "image_url": U}` (the same for
`video_url`). A part without a usable URL is still an item (url None): the engine refuses it with a 4xx, which
the client gets as the engine's answer.
"""

from dataclasses import dataclass
from typing import Any, Literal

Modality = Literal["image", "video"]
MODALITIES: dict[str, Modality] = {"image_url": "image", "video_url": "video"}


@dataclass(frozen=True, slots=True)
class MediaItem:
    modality: Modality
    url: str | None


def media_items(messages: Any) -> list[MediaItem]:
    items: list[MediaItem] = []
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for part in content:
            if not isinstance(part, dict):
                continue
            kind = part.get("type")
            modality = MODALITIES.get(kind) if isinstance(kind, str) else None
            if modality is None:
                continue
            value = part.get(kind)
            url = value.get("url") if isinstance(value, dict) else value
            items.append(MediaItem(modality, url if isinstance(url, str) and url else None))
    return items
