"""Leg bodies per docs/kv_transfer_params.md."""

from typing import Any

from motor.coordinator.http import jsonio

PREFILL_DROPPED = ("stream_options",)


def prefill_body(
    client_body: dict[str, Any], kv_transfer_params: dict[str, Any] | None, **extra: Any
) -> bytes:
    """The client's body shaped for a prefill leg: one token, not streamed, plus the profile's fields."""
    body = {k: v for k, v in client_body.items() if k not in PREFILL_DROPPED}
    body["stream"] = False
    body["max_tokens"] = 1
    if "max_completion_tokens" in client_body:
        body["max_completion_tokens"] = 1
    body["min_tokens"] = 1
    if kv_transfer_params is not None:
        body["kv_transfer_params"] = kv_transfer_params
    body.update(extra)
    return jsonio.dumps(body)


def encode_body(client_body: dict[str, Any]) -> bytes:
    """The client's body shaped for the encode leg: the engine encodes the media and answers one token, which
    is discarded (only the encoder output it hands to the prefill side matters)."""
    body = {k: v for k, v in client_body.items() if k not in PREFILL_DROPPED}
    body.update(stream=False, max_tokens=1, min_tokens=1, max_completion_tokens=1)
    return jsonio.dumps(body)


def decode_body(
    client_body: dict[str, Any], kv_transfer_params: dict[str, Any] | None, **extra: Any
) -> bytes:
    """The client's body plus the profile's fields for the decode leg."""
    body = dict(client_body)
    if kv_transfer_params is not None:
        body["kv_transfer_params"] = kv_transfer_params
    else:
        body.pop("kv_transfer_params", None)
    body.update(extra)
    return jsonio.dumps(body)
