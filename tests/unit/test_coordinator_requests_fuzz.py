"""Schema-level fuzz of client request parsing: whatever a client sends, `parse_request` answers a request or a
4xx HttpError (never another exception, which would be a 5xx), and an accepted request can be shaped into engine
legs and accounted for by the scheduler."""

import json
import re
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from motor.coordinator.client_request import (
    TRANSFER_FIELDS,
    ClientRequest,
    might_hold_large_number,
    parse_request,
)
from motor.coordinator.dispatch.shaping import decode_body, prefill_body
from motor.coordinator.http.errors import HttpError
from tests.unit.test_coordinator_scheduling import scheduler_with

MODELS = frozenset({"m"})

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
counts = st.integers(min_value=-5, max_value=2**70) | st.just(10**400) | json_values
content = st.text(max_size=50) | st.lists(
    st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=20) | json_values}), max_size=3
)
messages = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant"]) | json_values})
    | st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "system", "assistant"]), "content": content | json_values}
    )
    | json_values,
    max_size=4,
)
prompts = (
    st.text(max_size=50)
    | st.lists(st.text(max_size=10), max_size=4)
    | st.lists(st.integers(min_value=-(2**65), max_value=2**65), max_size=8)
    | st.lists(st.lists(st.integers(min_value=0, max_value=100), max_size=4), max_size=3)
    | json_values
)
OPTIONAL = {
    "max_tokens": counts,
    "max_completion_tokens": counts,
    "n": counts,
    "best_of": counts,
    "stream": st.booleans() | json_values,
    "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}) | json_values,
    "temperature": json_values,
    "seed": counts,
    "stop": json_values,
    **{name: json_values for name in TRANSFER_FIELDS},
}


@st.composite
def bodies(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    api = draw(st.sampled_from(["chat", "completions"]))
    body: dict[str, Any] = {"model": "m" if draw(st.integers(0, 3)) else draw(json_values)}
    body["messages" if api == "chat" else "prompt"] = draw(messages if api == "chat" else prompts)
    for name in draw(st.lists(st.sampled_from(sorted(OPTIONAL)), unique=True, max_size=5)):
        body[name] = draw(OPTIONAL[name])
    return api, body


def accepted_or_4xx(api: str, raw: bytes) -> ClientRequest | None:
    try:
        return parse_request(api, raw, MODELS)  # type: ignore[arg-type]
    except HttpError as error:
        assert 400 <= error.status < 500
        assert json.loads(error.body())["error"]["message"]
        return None


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies())
@example(("completions", {"model": "m", "prompt": "x", "max_tokens": 10**400}))  # issue #14: once a 500
def test_request_like_bodies_are_served_or_refused_with_a_4xx(case: tuple[str, dict[str, Any]]) -> None:
    api, body = case
    request = accepted_or_4xx(api, json.dumps(body).encode())
    if request is None:
        return
    assert not set(TRANSFER_FIELDS) & request.body.keys()
    params = {"do_remote_decode": True}
    assert json.loads(prefill_body(request.body, params))["kv_transfer_params"] == params
    json.loads(decode_body(request.body, None))
    demand = request.demand
    for policy in ("load_balance", "prefix_affinity"):
        scheduler, _ = scheduler_with(policy, 2, "union", affinity_block_size=4)
        target = scheduler.pick("union", demand)
        assert target is not None
        total = demand.prompt_tokens + demand.max_new_tokens
        scheduler.allocate(target, demand.max_new_tokens, total).release()


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_are_refused_with_a_4xx(raw: bytes) -> None:
    assert accepted_or_4xx("completions", raw) is None, raw


# What `might_hold_large_number` must answer: a run of 20 digits, or an exponent with at least 3 digits.
LARGE_NUMBER = re.compile(rb"\d{20}|[eE][+-]?\d{3}")


@settings(max_examples=2000, deadline=None)
@given(st.binary(max_size=60) | st.text(alphabet="0123456789eE+-.a ,", max_size=60).map(str.encode))
@example(b"1" * 20)
@example(b"1" * 19)
@example(b"1E-400")
@example(b"1e+40")
@example(b"x-e123")
def test_the_large_number_scan_answers_as_the_regular_expression(raw: bytes) -> None:
    assert might_hold_large_number(raw) == (LARGE_NUMBER.search(raw) is not None)
