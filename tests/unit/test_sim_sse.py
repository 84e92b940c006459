import json

from motor.engine.sim.sse import DONE, dumps, event


def test_event_is_a_data_line_and_a_blank_line() -> None:
    assert event({"a": 1, "b": [1, 2]}) == b'data: {"a":1,"b":[1,2]}\n\n'


def test_done_marker() -> None:
    assert DONE == b"data: [DONE]\n\n"


def test_unicode_is_written_as_utf8_and_round_trips() -> None:
    payload = {"text": "héllo ✓"}
    raw = event(payload)
    assert "✓".encode() in raw
    assert json.loads(raw.removeprefix(b"data: ").removesuffix(b"\n\n")) == payload
    assert dumps(None) == b"null"
