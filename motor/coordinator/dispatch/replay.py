"""Replay (`exception_config.reschedule_config`): a stream whose engine fails after its output started goes on.

An armed request asks its engines for token ids (`return_token_ids`; stripped before the client sees them
unless it asked). The ledger keeps the prompt's ids and every generated id that reached the client. When the
client-facing leg fails — the connection breaks, a read times out, the engine streams an error or ends with
`stop_reason: "recomputed"` — the request is dispatched again as a completions request whose prompt is the
prompt's ids plus the generated ones, asking for what is left of `max_tokens` (and `min_tokens`), through the
same flows (P → D, so its prefill finds the prompt's blocks in the KV pool and computes only the new tokens).
Its events are spliced into the client's stream: the first response's id, object, created and model; chat
deltas rebuilt from completion text; usage counting the whole answer. Each replay is bounded by
`transport_max_retry` (null: `max_retry`), waits `retry_delay · 2^replay` first, and never outlives the
request's `infer_timeout`.

What a replay cannot carry is never armed (`replay_refusal`): several choices, logprobs, tools, structured
output, multimodal content, echo or suffix. Those streams end with an error event naming why, as unarmed ones
do. Non-streamed requests are not armed: until their whole answer arrived nothing reached the client, so a
failure is an ordinary retry.
"""

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from motor.config.models import ExceptionConfig
from motor.coordinator.client_request import Api, ClientRequest
from motor.coordinator.dispatch.attempt import ERROR_EVENT_PREFIX, Attempt
from motor.coordinator.dispatch.dispatch import Dispatch
from motor.coordinator.dispatch.failures import LegFailure, engine_message, open_with_retries
from motor.coordinator.dispatch.flows import Flow
from motor.coordinator.http import jsonio
from motor.coordinator.http.sse import DONE_EVENT, EVENT_END, error_events, set_cached_tokens
from motor.coordinator.http.upstream import UpstreamError, UpstreamPool, get
from motor.coordinator.registry import Target
from motor.coordinator.scheduling.demand import Demand

log = logging.getLogger(__name__)

RECOMPUTED = "recomputed"
# What a completions continuation keeps of the client's body: sampling and stopping, nothing chat-only.
CONTINUATION_FIELDS = (
    "model",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "length_penalty",
    "stop",
    "stop_token_ids",
    "ignore_eos",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "include_stop_str_in_output",
    "bad_words",
    "logit_bias",
    "allowed_token_ids",
    "user",
    "priority",
    "stream_options",
)
_STRUCTURED = ("guided_json", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs")


def replay_refusal(request: ClientRequest) -> str | None:
    """Why a replay could not carry this request's state, or None when it can be armed."""
    body = request.body
    if body.get("n") not in (None, 1) or body.get("best_of") not in (None, 1):
        return "several choices (n > 1)"
    if body.get("logprobs") or body.get("top_logprobs") or body.get("prompt_logprobs"):
        return "logprobs"
    if body.get("tools") or body.get("functions"):
        return "tools"
    response_format = body.get("response_format")
    if (isinstance(response_format, dict) and response_format.get("type") not in (None, "text")) or any(
        body.get(name) is not None for name in _STRUCTURED
    ):
        return "structured output"
    if body.get("echo") or body.get("suffix"):
        return "echo or suffix"
    if request.api == "chat" and _multimodal(body.get("messages")):
        return "multimodal content"
    if request.api == "completions":
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int) and len(prompt) > 1:
            return "several prompts"
    return None


def _multimodal(messages: Any) -> bool:
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and any(
            isinstance(part, dict) and part.get("type") != "text" for part in content
        ):
            return True
    return False


def arm(request: ClientRequest) -> "StreamLedger":
    """Ask the engines for token ids; the ledger that follows the stream."""
    body = request.body
    wants_ids = body.get("return_token_ids") is True
    if not wants_ids:
        body["return_token_ids"] = True
        request.raw = jsonio.dumps(body)
    options = body.get("stream_options")
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
    min_tokens = body.get("min_tokens")
    return StreamLedger(
        api=request.api,
        wants_ids=wants_ids,
        include_usage=isinstance(options, dict) and options.get("include_usage") is True,
        max_tokens=max_tokens if isinstance(max_tokens, int) else None,
        min_tokens=min_tokens if isinstance(min_tokens, int) and not isinstance(min_tokens, bool) else 0,
        client_body=body,
    )


@dataclass(slots=True)
class StreamLedger:
    """What of one stream reached the client, and how to splice a replay into it."""

    api: Api
    wants_ids: bool
    include_usage: bool
    max_tokens: int | None
    min_tokens: int
    client_body: dict[str, Any]
    prompt_ids: list[int] | None = None
    generated: list[int] = field(default_factory=list)
    head: dict[str, Any] | None = None  # id, object, created, model of the first response
    finish_reason: str | None = None
    cached_tokens: int | None = None
    usage_sent: bool = False
    replays: int = 0
    last_output_at: float = 0.0

    # ---- the events of the stream ------------------------------------------------------------------------

    def process(self, events: bytes) -> tuple[bytes, str | None]:
        """The events to send the client, and why the stream must be replayed (an error event's message, or
        "recomputed") when an event says so — that event and those after it are not sent."""
        out: list[bytes] = []
        signal = None
        for event in events.split(EVENT_END):
            if not event:
                continue
            if event.startswith(ERROR_EVENT_PREFIX):
                signal = f"the engine streamed an error: {engine_message(event[6:])}"
                break
            if not event.startswith(b"data: {"):
                out.append(event)
                continue
            try:
                chunk = jsonio.loads(event[6:])
            except ValueError:
                out.append(event)
                continue
            if not isinstance(chunk, dict):
                out.append(event)
                continue
            if self._observe(chunk):
                signal = RECOMPUTED
                break
            out.append(b"data: " + jsonio.dumps(chunk))
        sent = EVENT_END.join(out) + EVENT_END if out else b""
        return sent, signal

    def _observe(self, chunk: dict[str, Any]) -> bool:
        """Record the chunk's ids and reshape it for the client; True when it ends the stream as recomputed."""
        choices = chunk.get("choices")
        choices = choices if isinstance(choices, list) else []
        if any(
            isinstance(c, dict) and RECOMPUTED in (c.get("stop_reason"), c.get("finish_reason"))
            for c in choices
        ):
            return True
        prompt_ids = chunk.pop("prompt_token_ids", None)
        continuing = self.replays > 0
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            choice_prompt = choice.pop("prompt_token_ids", None)
            prompt_ids = prompt_ids if prompt_ids is not None else choice_prompt
            ids = choice.get("token_ids")
            if isinstance(ids, list):
                self.generated.extend(ids)
            if not self.wants_ids:
                choice.pop("token_ids", None)
            if choice.get("finish_reason") is not None:
                self.finish_reason = choice["finish_reason"]
            if continuing and self.api == "chat":
                _as_chat_choice(choice)
        if self.prompt_ids is None and isinstance(prompt_ids, list):
            self.prompt_ids = prompt_ids
            if self.wants_ids:
                (choices[0] if self.api == "completions" and choices else chunk)["prompt_token_ids"] = (
                    prompt_ids
                )
        if self.head is None:
            self.head = {key: chunk.get(key) for key in ("id", "object", "created", "model")}
        elif continuing:
            chunk.update(self.head)
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage_sent = True
            if continuing and self.prompt_ids is not None:
                prompt_tokens = len(self.prompt_ids)
                usage.update(
                    prompt_tokens=prompt_tokens,
                    completion_tokens=len(self.generated),
                    total_tokens=prompt_tokens + len(self.generated),
                )
            if self.cached_tokens is not None:
                set_cached_tokens(chunk, self.cached_tokens)
        return False

    def closing(self) -> bytes:
        """The end of a stream whose answer was complete when its engine failed: usage if asked, [DONE]."""
        tail = b""
        if (
            self.include_usage
            and not self.usage_sent
            and self.head is not None
            and self.prompt_ids is not None
        ):
            prompt_tokens = len(self.prompt_ids)
            usage: dict[str, Any] = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": len(self.generated),
                "total_tokens": prompt_tokens + len(self.generated),
            }
            if self.cached_tokens is not None:
                usage["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
            tail = b"data: " + jsonio.dumps({**self.head, "choices": [], "usage": usage}) + EVENT_END
        return tail + DONE_EVENT

    # ---- the replay's request ----------------------------------------------------------------------------

    def remaining(self, max_model_len: int | None) -> int | None:
        """Output tokens the replay may still generate (None: unknown, the request has no bound)."""
        assert self.prompt_ids is not None
        if self.max_tokens is not None:
            return self.max_tokens - len(self.generated)
        if max_model_len is None:
            return None
        return max_model_len - len(self.prompt_ids) - len(self.generated)

    def continuation(self, max_tokens: int) -> ClientRequest:
        """The completions request that continues the stream from what the client has."""
        assert self.prompt_ids is not None
        prompt = [*self.prompt_ids, *self.generated]
        body = {key: self.client_body[key] for key in CONTINUATION_FIELDS if key in self.client_body}
        body.update(prompt=prompt, max_tokens=max_tokens, stream=True, return_token_ids=True)
        if self.min_tokens:
            body["min_tokens"] = max(0, self.min_tokens - len(self.generated))
        demand = Demand(prompt_tokens=len(prompt), max_new_tokens=max_tokens, prompt_token_ids=prompt)
        return ClientRequest(
            api="completions",
            raw=jsonio.dumps(body),
            body=body,
            model=self.client_body["model"],
            stream=True,
            demand=demand,
        )


def _as_chat_choice(choice: dict[str, Any]) -> None:
    """A completion choice of a continuation as the chat chunk choice the client's stream is made of."""
    text = choice.pop("text", None)
    choice.pop("prompt_logprobs", None)
    choice["delta"] = {"content": text} if text else {}


MaxModelLen = Callable[[str], Awaitable[int | None]]
Prepare = Callable[[ClientRequest], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Replayer:
    """What a replay needs of the process: the flow choice, the KV routing's preparation, the engines' context
    length (for a request with no max_tokens) and the bounds of exception_config."""

    choose_flow: Callable[[ClientRequest], Flow]
    prepare: Prepare
    max_model_len: MaxModelLen
    exceptions: ExceptionConfig
    count: Callable[[str], None]

    async def replay(self, d: Dispatch, ledger: StreamLedger, failure: LegFailure) -> Attempt | bytes:
        """The attempt streaming the continuation (its first output in hand), or the events that end the
        client's stream: the answer's end when it was complete, else an error naming why it ends."""
        if ledger.finish_reason is not None:
            self.count("completed")
            return ledger.closing()
        if d.attempt is not None:
            # from here the request is between attempts: ends from outside (client gone) cancel it again
            d.attempt.abandon("the stream is replayed")
            d.attempt = None
        broke = f"the stream broke after it started: {failure.message}"
        if ledger.prompt_ids is None:
            return self._refused(
                "no_prompt_ids", f"{broke}; not replayed: the engine returned no prompt token ids"
            )
        limit = self.exceptions.replay_retries
        if ledger.replays >= limit:
            return self._refused(
                "exhausted",
                f"{broke}; replayed {ledger.replays} times already (exception_config.transport_max_retry {limit})",
            )
        remaining = ledger.remaining(await self.max_model_len(ledger.client_body["model"]))
        if remaining is None:
            return self._refused(
                "no_bound", f"{broke}; not replayed: no max_tokens and the engines' context length is unknown"
            )
        if remaining <= 0:
            ledger.finish_reason = "length"
            self.count("completed")
            return ledger.closing()
        if failure.kind != "recomputed" and failure.target is not None:
            d.exclude(failure.role, failure.target.instance_id, failure.rule.instance_gone)
        delay = self.exceptions.retry_delay * 2**ledger.replays
        if d.loop.time() + delay >= d.deadline:
            message = f"the request exceeded infer_timeout ({self.exceptions.infer_timeout:g} s)"
            self.count("infer_timeout")
            return error_events(message, "timeout", "infer_timeout")
        log.warning(
            "request %s: %s; replaying %d generated tokens in %.3g s",
            d.label,
            failure.message,
            len(ledger.generated),
            delay,
        )
        if delay:
            await d.backoff(delay)
        ledger.replays += 1
        d.replays = ledger.replays
        d.request = ledger.continuation(remaining)
        await self.prepare(d.request)
        try:
            attempt = await open_with_retries(d, self.choose_flow)
        except LegFailure as final:
            return self._refused(
                "failed", f"{broke}; its replay failed: {final.message}", final.rule.stream_code
            )
        self.count("resumed")
        return attempt

    def _refused(self, outcome: str, message: str, code: str = "replay_failed") -> bytes:
        self.count(outcome)
        return error_events(message, "upstream_error", code)


def engine_context_length(
    targets: Callable[[], list[Target]], upstream: UpstreamPool, timeout: float
) -> MaxModelLen:
    """`max_model_len` of a model as its engines' `GET /v1/models` reports it (vLLM's and the simulator's
    field), asked once per model and process; None when no engine answers it."""
    known: dict[str, int] = {}

    async def max_model_len(model: str) -> int | None:
        if model in known:
            return known[model]
        candidates = targets()
        for target in sorted(candidates, key=lambda t: t.model_name != model)[:3]:
            length = await _ask_models(target, upstream, model, timeout)
            if length is not None:
                known[model] = length
                return length
        return None

    return max_model_len


async def _ask_models(target: Target, upstream: UpstreamPool, model: str, timeout: float) -> int | None:
    try:
        _, raw = await get(upstream, target.host, target.port, b"/v1/models", timeout)
        listing = jsonio.loads(raw)
    except (UpstreamError, ValueError):
        return None
    entries = listing.get("data") if isinstance(listing, dict) else None
    for entry in entries if isinstance(entries, list) else ():
        if (
            isinstance(entry, dict)
            and entry.get("id") == model
            and isinstance(entry.get("max_model_len"), int)
        ):
            return entry["max_model_len"]
    return None
