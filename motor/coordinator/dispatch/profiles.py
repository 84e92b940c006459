"""The four dispatch profiles of docs/kv_transfer_params.md, one attempt each, plus the per-request choice."""

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

from motor.coordinator.dispatch.callbacks import CallbackSlot
from motor.coordinator.dispatch.request import Dispatch, LegFailure, Opened, PrefillResult, no_instance
from motor.coordinator.registry import InstanceRegistry, Target
from motor.coordinator.shaping import decode_body
from motor.kv.connectors import DispatchProfile

Flow = Callable[[Dispatch], Awaitable[Opened]]


def _allocate_decode(d: Dispatch, target: Target) -> None:
    demand = d.request.demand
    d.allocate(target, demand.max_new_tokens, demand.prompt_tokens + demand.max_new_tokens)


async def prefill_first(d: Dispatch) -> Opened:
    d.pd = True
    first_deadline = d.first_token_deadline()
    prefill_target = d.pick("prefill")
    result = await d.prefill(
        prefill_target,
        {"do_remote_decode": True, "do_remote_prefill": False},
        d.prefill_deadline(first_deadline),
    )
    d.cached_tokens = result.cached_tokens
    decode_target = d.pick("decode")
    _allocate_decode(d, decode_target)
    body = decode_body(d.request.body, result.kv_transfer_params)
    return await d.open_client_leg(decode_target, body, first_deadline)


async def decode_first(d: Dispatch) -> Opened:
    d.pd = True
    first_deadline = d.first_token_deadline()
    decode_target = d.pick("decode")
    _allocate_decode(d, decode_target)
    slot = d.core.callbacks.open(d, first_deadline)
    try:
        params = {"do_remote_decode": False, "do_remote_prefill": True, "metaserver": slot.url}
        return await d.open_client_leg(decode_target, decode_body(d.request.body, params), first_deadline)
    except LegFailure:
        if slot.failure is not None:
            raise slot.failure from None
        raise
    finally:
        d.core.callbacks.close(slot)


async def answer_prefill_callback(slot: CallbackSlot, params: dict[str, Any]) -> PrefillResult:
    """Run the prefill leg a decode engine asked for. On failure the decode leg is closed at once, and the
    attempt fails with the prefill's error (so the retry avoids the prefill instance, not the decode)."""
    d = slot.dispatch
    try:
        target = d.pick("prefill")
        result = await d.prefill(target, params, d.prefill_deadline(slot.first_token_deadline))
    except LegFailure as failure:
        slot.failure = failure
        for connection in list(d.legs):
            connection.abort()
        raise
    d.cached_tokens = result.cached_tokens
    return result


async def concurrent(d: Dispatch) -> Opened:
    d.pd = True
    first_deadline = d.first_token_deadline()
    prefill_target = d.pick("prefill")
    decode_target = d.pick("decode")
    _allocate_decode(d, decode_target)
    room = secrets.randbits(63)
    transfer_id = str(room)
    bootstrap: dict[str, Any] = {"bootstrap_host": prefill_target.host, "bootstrap_room": room}
    prefill_params = {"do_remote_decode": True, "do_remote_prefill": False, "transfer_id": transfer_id}
    decode_params: dict[str, Any] = {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "transfer_id": transfer_id,
        "remote_engine_id": prefill_target.engine_id,
    }
    # Without a registered bootstrap port only transfer_id/room pair the legs, which is all pool-backed
    # connectors (and the sim engine) need; SGLang-style engines register their bootstrap port.
    if prefill_target.bootstrap_port is not None:
        bootstrap["bootstrap_port"] = prefill_target.bootstrap_port
        decode_params["remote_bootstrap_addr"] = (
            f"http://{prefill_target.host}:{prefill_target.bootstrap_port}"
        )
    prefill_task = asyncio.ensure_future(
        d.prefill(prefill_target, prefill_params, d.prefill_deadline(first_deadline), **bootstrap)
    )
    prefill_task.add_done_callback(_consume_outcome)
    d.companion = prefill_task
    decode_task = asyncio.ensure_future(
        d.open_client_leg(
            decode_target, decode_body(d.request.body, decode_params, **bootstrap), first_deadline
        )
    )
    waited_before = d.waited
    section_start = time.perf_counter()
    try:
        await asyncio.wait((prefill_task, decode_task), return_when=asyncio.FIRST_COMPLETED)
        if prefill_task.done() and prefill_task.exception() is not None:
            raise prefill_task.exception()  # type: ignore[misc]
        opened = await decode_task
    except BaseException:
        for task in (prefill_task, decode_task):
            task.cancel()
        await asyncio.gather(prefill_task, decode_task, return_exceptions=True)
        raise
    finally:
        # Both legs waited at once: count the section's wall time once, not each leg's waits.
        d.waited = waited_before + (time.perf_counter() - section_start)
    if prefill_task.done():
        d.cached_tokens = prefill_task.result().cached_tokens
    return opened


async def prefill_cached_tokens(d: Dispatch) -> int | None:
    """The prefill's cached-token count, waiting (within the prefill's own deadline) if it still runs."""
    companion = d.companion
    if d.cached_tokens is None and companion is not None:
        try:
            d.cached_tokens = (await asyncio.shield(companion)).cached_tokens
        except asyncio.CancelledError:
            if companion.cancelled():
                return None
            raise
        except Exception:
            return None
    return d.cached_tokens


def _consume_outcome(task: "asyncio.Task[PrefillResult]") -> None:
    if not task.cancelled():
        task.exception()


def aggregated_on(role: str) -> Flow:
    async def aggregated(d: Dispatch) -> Opened:
        target = d.pick(role)
        demand = d.request.demand
        total = demand.prompt_tokens + demand.max_new_tokens
        d.allocate(target, total, total)
        return await d.open_client_leg(target, d.request.raw, d.first_token_deadline())

    return aggregated


PD_FLOWS: dict[DispatchProfile, Flow] = {
    DispatchProfile.PREFILL_FIRST: prefill_first,
    DispatchProfile.DECODE_FIRST: decode_first,
    DispatchProfile.CONCURRENT: concurrent,
}
AGGREGATED_ON_UNION = aggregated_on("union")
AGGREGATED_ON_PREFILL = aggregated_on("prefill")


def choose_flow(profile: DispatchProfile, registry: InstanceRegistry) -> Flow:
    """The profile's flow when its roles are up; aggregated on union or prefill instances as the fallback.

    Decided per attempt from the instance set of that moment; when no flow can run, the retryable
    LegFailure lets the attempt wait (with backoff) for the controller to register instances.
    """
    if profile != DispatchProfile.AGGREGATED and registry.has_role("prefill") and registry.has_role("decode"):
        return PD_FLOWS[profile]
    if registry.has_role("union"):
        return AGGREGATED_ON_UNION
    if registry.has_role("prefill"):
        return AGGREGATED_ON_PREFILL
    if registry.has_role("decode"):
        raise no_instance(
            "prefill",
            "only decode instances are registered and a decode engine cannot prefill: start prefill (or union) "
            "instances, or wait until the controller registers them",
            "no_prefill_instance",
        )
    raise no_instance(
        "union" if profile == DispatchProfile.AGGREGATED else "prefill",
        "no engine instance is registered with the coordinator yet; wait for the controller to register "
        "instances (see GET /readiness on the management port)",
    )


def required_roles(profile: DispatchProfile, configured_roles: set[str]) -> list[str]:
    """The roles whose presence makes the coordinator ready for its profile."""
    if profile != DispatchProfile.AGGREGATED:
        return ["prefill", "decode"]
    return ["union"] if "union" in configured_roles or not configured_roles else ["prefill"]
