"""The seed's MultiConnector fix, for vllm-ascend older than v0.17.0rc2 (later releases contain it).

With layer-wise push transfer (a sub-connector with `send_type` PUT or PUT_ASYNC) combined with a KV pool in
one MultiConnector, the push connector on the producer side must learn which blocks a request got even when
another sub-connector (the pool) was chosen to load the request's external tokens; affected versions hand it
no blocks, so decode never receives the KV. The fix forwards `update_state_after_alloc` with the request's
real blocks to every producer sub-connector whose send_type is PUT or PUT_ASYNC.
"""

from types import ModuleType
from typing import Any

from packaging.version import InvalidVersion, Version

from motor.engine.patches.facts import Facts
from motor.engine.patches.patch import Decision, Patch, PatchTargetError, replace_method

FIXED_IN = Version("0.17.0rc2")
TARGET = "vllm.distributed.kv_transfer.kv_connector.v1.multi_connector"
PUSH_SEND_TYPES = frozenset({"PUT", "PUT_ASYNC"})
PRODUCER_ROLES = frozenset({"kv_producer", "kv_both"})


def decide(facts: Facts) -> Decision:
    installed = facts.vllm_ascend_version
    if installed is None:
        return Decision(
            False, "vllm-ascend is not installed; only its releases before 0.17.0rc2 need this fix"
        )
    try:
        version = Version(installed)
    except InvalidVersion:
        return Decision(
            False, f"vllm-ascend version {installed!r} is not a PEP 440 version; cannot tell, not applied"
        )
    if version >= FIXED_IN:
        return Decision(False, f"vllm-ascend {installed} already contains the fix (>= {FIXED_IN})")
    if facts.vllm_version is None:
        return Decision(False, f"vllm-ascend {installed} needs the fix, but vLLM itself is not installed")
    return Decision(
        True, f"vllm-ascend {installed} < {FIXED_IN}: MultiConnector drops push connectors' blocks"
    )


def push_producer_indices(sub_configs: list[Any], default_role: str | None) -> set[int]:
    """Indices of the sub-connectors that push KV: send_type PUT/PUT_ASYNC on a producer side."""
    indices = set()
    for index, config in enumerate(sub_configs):
        extra = _get(config, "kv_connector_extra_config") or {}
        send_type = str(extra.get("send_type", "")).upper()
        role = _get(config, "kv_role") or default_role
        if send_type in PUSH_SEND_TYPES and role in PRODUCER_ROLES:
            indices.add(index)
    return indices


def _get(config: Any, key: str) -> Any:
    return config.get(key) if isinstance(config, dict) else getattr(config, key, None)


def _sub_configs(connector: Any) -> tuple[list[Any], str | None]:
    top = connector._vllm_config.kv_transfer_config
    extra = getattr(top, "kv_connector_extra_config", None) or {}
    return list(extra.get("connectors") or []), getattr(top, "kv_role", None)


def update_state_after_alloc(self: Any, request: Any, blocks: Any, num_external_tokens: int) -> None:
    chosen = self._requests_to_connector.get(request.request_id, -1)
    pushers = push_producer_indices(*_sub_configs(self))
    no_blocks = blocks.new_empty() if hasattr(blocks, "new_empty") else blocks
    for index, connector in enumerate(self._connectors):
        if index == chosen:
            connector.update_state_after_alloc(request, blocks, num_external_tokens)
        elif index in pushers:
            connector.update_state_after_alloc(request, blocks, 0)
        else:
            connector.update_state_after_alloc(request, no_blocks, 0)


def apply(module: ModuleType | None, _facts: Facts) -> None:
    cls = getattr(module, "MultiConnector", None)
    required = ("update_state_after_alloc",)
    if cls is None or any(not hasattr(cls, name) for name in required):
        raise PatchTargetError(f"{TARGET} has no MultiConnector.update_state_after_alloc")
    replace_method(cls, "update_state_after_alloc", update_state_after_alloc)


PATCH = Patch(
    name="multi-connector-push-blocks",
    summary="MultiConnector forwards update_state_after_alloc with real blocks to PUT/PUT_ASYNC producers",
    decide=decide,
    targets=(TARGET,),
    apply=apply,
)
