"""decode_first callback listener: decode engines POST here to have the coordinator run the prefill leg."""

import json
import time

from motor.coordinator.dispatch.callbacks import CALLBACK_PATH_PREFIX, CallbackRegistry
from motor.coordinator.dispatch.failures import EngineRejected, LegFailure
from motor.coordinator.dispatch.flows import answer_prefill_callback
from motor.coordinator.http.asgi import Receive, Scope, Send, not_found, read_body, send_bytes, send_error
from motor.coordinator.http.errors import HttpError, bad_request

CALLBACK_BODY_LIMIT = 1 << 20


class CallbackApp:
    def __init__(self, callbacks: CallbackRegistry) -> None:
        self.callbacks = callbacks

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        slot = None
        if scope["method"] == "POST" and path.startswith(CALLBACK_PATH_PREFIX):
            slot = self.callbacks.get(path[len(CALLBACK_PATH_PREFIX) :])
        if slot is None:
            error = not_found(path)
            error.message = "unknown callback: the request it belonged to has ended or never existed"
            await send_error(send, error)
            return
        d = slot.attempt.dispatch
        started = time.perf_counter()
        mark = d.wait_mark()
        try:
            params = json.loads(await read_body(scope, receive, CALLBACK_BODY_LIMIT))
            if not isinstance(params, dict):
                raise bad_request("the callback body must be a JSON object")
            request_id = params.get("request_id")
            if isinstance(request_id, str) and d.request_id not in request_id:
                raise bad_request(
                    f"request_id {request_id!r} does not belong to this callback", param="request_id"
                )
            result = await answer_prefill_callback(slot, params)
            await send_bytes(send, 200, result.raw)
        except ValueError:
            await send_error(send, bad_request("the callback body is not valid JSON"))
        except HttpError as error:
            await send_error(send, error)
        except EngineRejected as rejected:
            await send_bytes(send, rejected.status, rejected.body, content_type=rejected.content_type)
        except LegFailure as failure:
            await send_error(
                send, HttpError(failure.status, failure.message, type_="upstream_error", code=failure.reason)
            )
        finally:
            d.callback_served(mark, started)
