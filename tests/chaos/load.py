"""Bounded open-loop load for the chaos harness, every answer checked against the sim's token oracle.

Request i starts at t0 + i / rate whatever happened to the earlier ones (open loop: a stalled cluster does not
slow the load down, it piles up). The mix alternates chat and completions, streamed and not; every prompt is
one of a few long shared prefixes plus a short unique tail, so prefill engines find blocks in the pool. Each
request asks for `return_token_ids` and `ignore_eos`, so its tokens are compared with
`tests.fixtures.sim.expected_tokens` (the oracle recomputed from the simulator's specification): an answer
that repeats, skips or changes a token shows.

Every request ends within its deadline or is counted as hung. The load runs on its own event loop in a thread,
so the test that injects faults may block.
"""

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import httpx

from tests.fixtures.sim import expected_tokens

PREFIXES = 4
PREFIX_WORDS = 96
TAIL_WORDS = 8
MAX_TOKENS = 16


class End(StrEnum):
    OK = "ok"
    ERROR_BEFORE_TOKEN = "error before the first token"  # an OpenAI error body, or an SSE error event first
    CONNECTION_BEFORE_TOKEN = "connection error before the first token"
    ERROR_AFTER_TOKEN = "error event after tokens"  # `data: {"error": ...}` then `data: [DONE]`
    CONNECTION_AFTER_TOKEN = "connection error after tokens"
    CUT_AFTER_TOKEN = "cut after tokens"  # the stream or body ended early without an error event and [DONE]
    HUNG = "hung"  # no end within the deadline


@dataclass
class Outcome:
    index: int
    stream: bool
    endpoint: str
    started: float  # time.monotonic()
    ended: float
    end: End
    tokens: int = 0
    wrong_tokens: bool = False  # what arrived is not (a prefix of) the oracle's answer
    detail: str = ""

    @property
    def seconds(self) -> float:
        return self.ended - self.started


@dataclass
class _Reply:
    """What one request received."""

    prompt_ids: list[int] | None = None
    token_ids: list[int] = field(default_factory=list)
    error: str | None = None
    done: bool = False
    completed: bool = False  # a whole non-stream response


def prompt_text(index: int) -> str:
    prefix = index % PREFIXES
    shared = " ".join(f"p{prefix}w{i}" for i in range(PREFIX_WORDS))
    tail = " ".join(f"r{index}t{i}" for i in range(TAIL_WORDS))
    return f"{shared} {tail}"


def request_body(index: int) -> tuple[str, bool, dict[str, Any]]:
    """(endpoint, stream, body) of request `index`: chat and completions, streamed and not, in turn."""
    endpoint = "chat/completions" if index % 2 else "completions"
    stream = (index // 2) % 2 == 0
    body: dict[str, Any] = {
        "model": "sim-model",
        "max_tokens": MAX_TOKENS,
        "seed": index,
        "temperature": 1.0,
        "ignore_eos": True,
        "return_token_ids": True,
        "stream": stream,
    }
    if endpoint == "completions":
        body["prompt"] = prompt_text(index)
    else:
        body["messages"] = [{"role": "user", "content": prompt_text(index)}]
    return endpoint, stream, body


def oracle_agrees(reply: _Reply, seed: int) -> bool:
    if reply.prompt_ids is None:
        return not reply.token_ids
    expected = expected_tokens(reply.prompt_ids, max_tokens=MAX_TOKENS, seed=seed, ignore_eos=True)
    return reply.token_ids == expected[: len(reply.token_ids)]


class OpenLoopLoad:
    """`rate` requests per second against `base_url` from `start()` until `stop()`; `join()` waits for every
    request to end (each within `deadline_s`) and returns the outcomes in request order."""

    def __init__(self, base_url: str, rate: float, deadline_s: float) -> None:
        self.base_url = base_url
        self.rate = rate
        self.deadline_s = deadline_s
        self.outcomes: list[Outcome] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="chaos-load", daemon=True)
        self._error: BaseException | None = None

    def start(self) -> "OpenLoopLoad":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def join(self) -> list[Outcome]:
        self._stop.set()
        self._thread.join(timeout=self.deadline_s + 60)
        if self._thread.is_alive():
            raise AssertionError("the load did not end within its deadline")
        if self._error is not None:
            raise self._error
        return sorted(self.outcomes, key=lambda outcome: outcome.index)

    def ok_count(self) -> int:
        return sum(outcome.end is End.OK for outcome in list(self.outcomes))

    def ok_since(self, moment: float) -> int:
        return sum(outcome.end is End.OK and outcome.started >= moment for outcome in list(self.outcomes))

    def _main(self) -> None:
        try:
            asyncio.run(self._drive())
        except BaseException as exc:  # surfaced by join()
            self._error = exc

    async def _drive(self) -> None:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
        async with httpx.AsyncClient(base_url=self.base_url, timeout=None, limits=limits) as client:
            began = time.monotonic()
            tasks: list[asyncio.Task[None]] = []
            index = 0
            while not self._stop.is_set():
                due = began + index / self.rate
                delay = due - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(self._one(client, index)))
                index += 1
            await asyncio.gather(*tasks)

    async def _one(self, client: httpx.AsyncClient, index: int) -> None:
        endpoint, stream, body = request_body(index)
        started = time.monotonic()
        reply = _Reply()
        end, detail = End.OK, ""
        try:
            async with asyncio.timeout(self.deadline_s):
                if stream:
                    await _streamed(client, endpoint, body, reply)
                else:
                    await _whole(client, endpoint, body, reply)
        except TimeoutError:
            end, detail = End.HUNG, f"no end within {self.deadline_s:g} s"
        except httpx.TransportError as exc:
            end = End.CONNECTION_AFTER_TOKEN if reply.token_ids else End.CONNECTION_BEFORE_TOKEN
            detail = f"{type(exc).__name__}: {exc}"
        if end is End.OK:
            end, detail = _verdict(reply, stream)
        self.outcomes.append(
            Outcome(
                index=index,
                stream=stream,
                endpoint=endpoint,
                started=started,
                ended=time.monotonic(),
                end=end,
                tokens=len(reply.token_ids),
                wrong_tokens=not oracle_agrees(reply, seed=index),
                detail=detail,
            )
        )


def _verdict(reply: _Reply, stream: bool) -> tuple[End, str]:
    if reply.error is not None:
        if not reply.token_ids:
            return End.ERROR_BEFORE_TOKEN, reply.error
        return (End.ERROR_AFTER_TOKEN if reply.done else End.CUT_AFTER_TOKEN), reply.error
    if stream and not reply.done:
        return (
            End.CUT_AFTER_TOKEN if reply.token_ids else End.ERROR_BEFORE_TOKEN
        ), "stream ended without [DONE]"
    if len(reply.token_ids) != MAX_TOKENS:
        return (End.CUT_AFTER_TOKEN if reply.token_ids else End.ERROR_BEFORE_TOKEN), (
            f"{len(reply.token_ids)} of {MAX_TOKENS} tokens"
        )
    return End.OK, ""


async def _whole(client: httpx.AsyncClient, endpoint: str, body: dict[str, Any], reply: _Reply) -> None:
    response = await client.post(f"/v1/{endpoint}", json=body)
    try:
        payload = response.json()
    except ValueError:
        reply.error = f"HTTP {response.status_code}, not JSON: {response.text[:200]}"
        return
    if response.status_code != 200:
        error = payload.get("error") if isinstance(payload, dict) else None
        explicit = isinstance(error, dict) and "message" in error
        reply.error = f"HTTP {response.status_code}: {error['message'] if explicit else response.text[:200]}"
        return
    choice = payload["choices"][0]
    reply.prompt_ids = choice.get("prompt_token_ids") or payload.get("prompt_token_ids")
    reply.token_ids = list(choice.get("token_ids") or [])
    reply.completed = True


async def _streamed(client: httpx.AsyncClient, endpoint: str, body: dict[str, Any], reply: _Reply) -> None:
    async with client.stream("POST", f"/v1/{endpoint}", json=body) as response:
        if response.status_code != 200:
            text = (await response.aread()).decode(errors="replace")
            try:
                message = json.loads(text)["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = text[:200]
            reply.error = f"HTTP {response.status_code}: {message}"
            return
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                reply.done = True
                continue
            chunk = json.loads(data)
            if "error" in chunk:
                reply.error = f"error event: {chunk['error'].get('message', chunk['error'])}"
                continue
            reply.prompt_ids = reply.prompt_ids or chunk.get("prompt_token_ids")
            for choice in chunk.get("choices", []):
                reply.prompt_ids = reply.prompt_ids or choice.get("prompt_token_ids")
                reply.token_ids.extend(choice.get("token_ids") or [])
