"""Mutating the seed config thousands of times yields motor's config errors, never a traceback."""

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from motor.config import ConfigError, Topology, load_documents
from tests.unit.config_cases import seed

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=True)
    | st.text(max_size=12),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=6,
)
interesting_strings = st.sampled_from(
    [
        "MultiConnector",
        "NixlConnector",
        "MooncakeStoreConnector",
        "kv_producer",
        "kv_consumer",
        "kv_both",
        "1GB",
        "0",
        "-5",
        "local",
        "sglang",
        "sim",
        "infer_service_set",
        "prefix_affinity",
        "decode_first",
    ]
)


def containers(document: Any, path: tuple = ()) -> list[tuple[tuple, Any]]:
    found = [(path, document)] if isinstance(document, dict | list) else []
    if isinstance(document, dict):
        for key, value in document.items():
            found.extend(containers(value, (*path, key)))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            found.extend(containers(value, (*path, index)))
    return found


@st.composite
def mutated_configs(draw: st.DrawFn) -> tuple[Any, Any]:
    docs = list(seed())
    for _ in range(draw(st.integers(1, 4))):
        which = draw(st.integers(0, 1))
        _, container = draw(st.sampled_from(containers(docs[which])))
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        value = draw(json_values | interesting_strings)
        keys = list(container.keys()) if isinstance(container, dict) else list(range(len(container)))
        if action == "add" or not keys:
            if isinstance(container, dict):
                container[draw(st.text(max_size=10) | interesting_strings)] = value
            else:
                container.append(value)
            continue
        key = draw(st.sampled_from(keys))
        if action == "delete":
            del container[key]
        else:
            container[key] = value
    if draw(st.booleans()) and draw(st.integers(0, 20)) == 0:
        docs[draw(st.integers(0, 1))] = draw(json_values)
    return docs[0], docs[1]


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_configs())
def test_mutations_give_config_errors_only(docs):
    user, env = docs
    try:
        result = load_documents(user, env)
    except ConfigError as exc:
        assert exc.issues
        assert all(issue.path and issue.message for issue in exc.issues)
    else:
        assert isinstance(result, Topology)
