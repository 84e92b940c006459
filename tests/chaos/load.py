"""Bounded open-loop load for the chaos harness, every answer checked against the sim's token oracle.

Request i starts at t0 + i / rate whatever happened to the earlier ones (open loop: a stalled cluster does not
slow the load down, it piles up). The mix alternates chat and completions, streamed and not; every prompt is
one of a few long shared prefixes plus a short unique tail, so prefill engines find blocks in the pool. Each
request asks for `return_token_ids` and `ignore_eos`, so its tokens are compared with
`tests.fixtures.sim.expected_tokens` (the oracle recomputed from the simulator's specification): an answer
that repeats, skips or changes a token shows.

Every request ends within its deadline or is counted as hung. The load runs in a process of its own, so the
test that injects faults may block.
"""

import asyncio
import json
import multiprocessing
import time
from dataclasses import dataclass, field
from enum import StrEnum
from multiprocessing.connection import Connection
from typing import Any

import aiohttp
import uvloop

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
    request to end (each within `deadline_s`) and returns the outcomes in request order.

    The load runs in a process of its own (uvloop, aiohttp), so that neither the test's polling nor the GIL
    delays it: a request is judged by what the cluster did, not by how busy its client was."""

    def __init__(self, base_url: str, rate: float, deadline_s: float) -> None:
        self.base_url = base_url
        self.rate = rate
        self.deadline_s = deadline_s
        context = multiprocessing.get_context("spawn")
        self._stop = context.Event()
        self._results, sender = context.Pipe(duplex=False)
        self._process = context.Process(
            target=_load_process, args=(base_url, rate, deadline_s, self._stop, sender), daemon=True
        )
        self._sender = sender

    def start(self, ready_timeout_s: float = 60.0) -> "OpenLoopLoad":
        self._process.start()
        self._sender.close()
        if not self._results.poll(ready_timeout_s):
            self._process.kill()
            raise AssertionError(f"the load process did not start within {ready_timeout_s:g} s")
        self._expect("ready")
        return self

    def join(self) -> list[Outcome]:
        self._stop.set()
        if not self._results.poll(self.deadline_s + 60):
            self._process.kill()
            raise AssertionError("the load did not end within its deadline")
        outcomes = self._expect("done")
        self._process.join(timeout=10)
        return sorted(outcomes, key=lambda outcome: outcome.index)

    def _expect(self, kind: str) -> Any:
        message = self._results.recv()
        if message[0] == "error":
            raise AssertionError(f"the load process failed: {message[1]}")
        assert message[0] == kind, message
        return message[1]


def _load_process(base_url: str, rate: float, deadline_s: float, stop: Any, results: Connection) -> None:
    try:
        outcomes = uvloop.run(_drive(base_url, rate, deadline_s, stop, results))
    except BaseException as exc:
        results.send(("error", f"{type(exc).__name__}: {exc}"))
        raise
    results.send(("done", outcomes))


async def _drive(
    base_url: str, rate: float, deadline_s: float, stop: Any, results: Connection
) -> list[Outcome]:
    outcomes: list[Outcome] = []
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(
        base_url, connector=connector, timeout=aiohttp.ClientTimeout(total=None)
    ) as session:
        results.send(("ready", None))
        began = time.monotonic()
        tasks: list[asyncio.Task[None]] = []
        index = 0
        while not stop.is_set():
            delay = began + index / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(min(delay, 0.1))
                continue
            tasks.append(asyncio.create_task(_one(session, index, deadline_s, outcomes)))
            index += 1
        await asyncio.gather(*tasks)
    return outcomes


async def _one(
    session: aiohttp.ClientSession, index: int, deadline_s: float, outcomes: list[Outcome]
) -> None:
    endpoint, stream, body = request_body(index)
    started = time.monotonic()
    reply = _Reply()
    end, detail = End.OK, ""
    try:
        async with asyncio.timeout(deadline_s):
            async with session.post(f"/v1/{endpoint}", json=body) as response:
                await (_streamed(response, reply) if stream else _whole(response, reply))
    except TimeoutError:
        end, detail = End.HUNG, f"no end within {deadline_s:g} s"
    except (aiohttp.ClientError, OSError) as exc:
        end = End.CONNECTION_AFTER_TOKEN if reply.token_ids else End.CONNECTION_BEFORE_TOKEN
        detail = f"{type(exc).__name__}: {exc}"
    except ValueError as exc:  # a body or event that is not JSON
        end = End.CUT_AFTER_TOKEN if reply.token_ids else End.ERROR_BEFORE_TOKEN
        detail = f"malformed answer: {exc}"
    if end is End.OK:
        end, detail = _verdict(reply, stream)
    outcomes.append(
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


async def _error_message(response: aiohttp.ClientResponse) -> str:
    text = (await response.read()).decode(errors="replace")
    try:
        message = json.loads(text)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = text[:200]
    return f"HTTP {response.status}: {message}"


async def _whole(response: aiohttp.ClientResponse, reply: _Reply) -> None:
    if response.status != 200:
        reply.error = await _error_message(response)
        return
    payload = json.loads(await response.read())
    choice = payload["choices"][0]
    reply.prompt_ids = choice.get("prompt_token_ids") or payload.get("prompt_token_ids")
    reply.token_ids = list(choice.get("token_ids") or [])
    reply.completed = True


async def _streamed(response: aiohttp.ClientResponse, reply: _Reply) -> None:
    if response.status != 200:
        reply.error = await _error_message(response)
        return
    async for raw in response.content:
        line = raw.decode().rstrip("\r\n")
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
