"""The four dispatch profiles of docs/kv_transfer_params.md as flows over one attempt, and the per-attempt
choice of flow (the P/D profile handler: which legs a request needs, before the scheduler places each).

A chat request with multimodal items runs the encode leg first while encode instances are routable (every
profile's flow, `ENCODED`); with no encode instance registered at all the prefill side encodes them itself.
"""

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from motor.coordinator.client_request import ClientRequest
from motor.coordinator.dispatch.attempt import Attempt, Leg, PrefillResult
from motor.coordinator.dispatch.callbacks import CallbackSlot
from motor.coordinator.dispatch.failures import LegFailure, no_instance
from motor.coordinator.dispatch.shaping import decode_body
from motor.coordinator.registry import InstanceRegistry, Target
from motor.kv.connectors import DispatchProfile


@dataclass(frozen=True, slots=True)
class Flow:
    name: str
    pd: bool
    run: Callable[[Attempt], Awaitable[None]]


def _decode_leg(a: Attempt, target: Target) -> Leg:
    demand = a.dispatch.request.demand
    return a.client_leg(target, demand.max_new_tokens, demand.prompt_tokens + demand.max_new_tokens)


async def _prefill_first(a: Attempt) -> None:
    prefill = a.prefill_leg(await a.pick("prefill"))
    result = await a.run_prefill(prefill, {"do_remote_decode": True, "do_remote_prefill": False})
    decode = _decode_leg(a, await a.pick("decode"))
    await a.open_client_leg(decode, decode_body(a.dispatch.request.body, result.kv_transfer_params))


async def _decode_first(a: Attempt) -> None:
    decode = _decode_leg(a, await a.pick("decode"))
    callbacks = a.context.callbacks
    slot = callbacks.open(a)
    try:
        params = {"do_remote_decode": False, "do_remote_prefill": True, "metaserver": slot.url}
        await a.open_client_leg(decode, decode_body(a.dispatch.request.body, params))
    finally:
        callbacks.close(slot)


async def answer_prefill_callback(slot: CallbackSlot, params: dict[str, Any]) -> PrefillResult:
    """Run the prefill leg a decode engine asked for. On failure the decode leg is closed at once, and the
    attempt fails with the prefill's error (so the retry avoids the prefill instance, not the decode)."""
    a = slot.attempt
    try:
        prefill = a.prefill_leg(await a.pick("prefill"))
        return await a.run_prefill(prefill, params)
    except LegFailure as failure:
        a.prefill_failed(failure)
        raise


async def _concurrent(a: Attempt) -> None:
    prefill_target = await a.pick("prefill")
    decode = _decode_leg(a, await a.pick("decode"))
    prefill = a.prefill_leg(prefill_target)
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
    a.prefill_in_background(prefill, prefill_params, **bootstrap)
    prefill_task = prefill.task
    assert prefill_task is not None
    decode_task = asyncio.ensure_future(
        a.open_client_leg(decode, decode_body(a.dispatch.request.body, decode_params, **bootstrap))
    )
    dispatch = a.dispatch
    mark = dispatch.wait_mark()
    section_start = time.perf_counter()
    try:
        await asyncio.wait((prefill_task, decode_task), return_when=asyncio.FIRST_COMPLETED)
        # Decode output means the KV arrived: a prefill failure settled in the same turn (its answer missed its
        # deadline while the decode side already streamed) must not fail a request that is being answered.
        decoded = decode_task.done() and not decode_task.cancelled() and decode_task.exception() is None
        if not decoded and prefill_task.done() and prefill_task.exception() is not None:
            raise prefill_task.exception()  # type: ignore[misc]
        await decode_task
    except BaseException:
        for task in (prefill_task, decode_task):
            task.cancel()
        await asyncio.gather(prefill_task, decode_task, return_exceptions=True)
        raise
    finally:
        dispatch.parallel_waits(mark, time.perf_counter() - section_start)


def _aggregated_on(role: str) -> Flow:
    async def aggregated(a: Attempt) -> None:
        demand = a.dispatch.request.demand
        total = demand.prompt_tokens + demand.max_new_tokens
        leg = a.client_leg(await a.pick(role), total, total)
        await a.open_client_leg(leg, a.dispatch.request.raw)

    return Flow(f"aggregated on {role}", False, aggregated)


PD_FLOWS: dict[DispatchProfile, Flow] = {
    DispatchProfile.PREFILL_FIRST: Flow("prefill_first", True, _prefill_first),
    DispatchProfile.DECODE_FIRST: Flow("decode_first", True, _decode_first),
    DispatchProfile.CONCURRENT: Flow("concurrent", True, _concurrent),
}
AGGREGATED_ON_UNION = _aggregated_on("union")
AGGREGATED_ON_PREFILL = _aggregated_on("prefill")


def _encoded(flow: Flow) -> Flow:
    async def encode_then_flow(a: Attempt) -> None:
        await a.run_encode()
        await flow.run(a)

    return Flow(f"encode, then {flow.name}", flow.pd, encode_then_flow)


ENCODED: dict[Flow, Flow] = {
    flow: _encoded(flow) for flow in (*PD_FLOWS.values(), AGGREGATED_ON_UNION, AGGREGATED_ON_PREFILL)
}


def choose_flow(
    profile: DispatchProfile,
    registry: InstanceRegistry,
    fallback_to_hybrid: bool = True,
    request: ClientRequest | None = None,
) -> Flow:
    """The profile's flow when its roles are up; aggregated on union or prefill instances as the fallback
    (pyMotor's `enable_pd_separation_fallback_to_hybrid`; without it a PD profile waits for its roles).
    `request` with multimodal items gets the flow's encode-first form (`ENCODED`) while encode instances are
    routable; when encode instances are registered but none is routable, it waits for one (the prefill side
    of an EPD deployment cannot encode).

    Decided per attempt from the instance set of that moment; when no flow can run, the retryable
    LegFailure lets the attempt wait (with backoff) for the controller to register instances.
    """
    flow = _pd_or_aggregated(profile, registry, fallback_to_hybrid)
    if request is None or request.encode is None:
        return flow
    if registry.has_role("encode"):
        return ENCODED[flow]
    if registry.knows_role("encode"):
        raise no_instance(
            "encode",
            "the request has images or videos and no encode instance can take its encode leg: the registered "
            "ones are not active or their circuit is open; wait until one is routable again",
            "no_encode_instance",
        )
    return flow


def _pd_or_aggregated(profile: DispatchProfile, registry: InstanceRegistry, fallback_to_hybrid: bool) -> Flow:
    pd = profile != DispatchProfile.AGGREGATED
    if pd and registry.has_role("prefill") and registry.has_role("decode"):
        return PD_FLOWS[profile]
    if pd and not fallback_to_hybrid:
        missing = "prefill" if not registry.has_role("prefill") else "decode"
        raise no_instance(
            missing,
            f"no {missing} instance can take the request and scheduler_config."
            "enable_pd_separation_fallback_to_hybrid is false: wait until the controller registers one (or "
            "an open circuit closes), or set it to true to serve aggregated on what is left",
            f"no_{missing}_instance",
        )
    if registry.has_role("union"):
        return AGGREGATED_ON_UNION
    if registry.has_role("prefill"):
        return AGGREGATED_ON_PREFILL
    if registry.open_circuits:
        raise no_instance(
            "union" if profile == DispatchProfile.AGGREGATED else "prefill",
            f"no instance can take the request: the circuit of {', '.join(sorted(registry.open_circuits))} is "
            "open after repeated failures (it gets legs again once it answers /health; see "
            "motor_coordinator_circuit_open)",
        )
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
