"""One response's rendering over the chat generation (pure): the stream's events as the text arrives, and the
response object at the end. It is both the `Render` and the `Wire` of the gateway's `Generation`."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from gateway.core.chat import ChatRender
from gateway.core.choices import ChoiceAccumulator, ChoiceDelta
from gateway.core.logprobs import Position, chat_logprobs
from gateway.errors import OpenAIError
from gateway.responses.events import EventSequence
from gateway.responses.objects import response_object
from gateway.responses.protocol import ResponsesRequest
from gateway.responses.translate import new_id, output_items

log = logging.getLogger("gateway.responses")
OnDone = Callable[[dict[str, Any]], Awaitable[None]]


class ResponsesRender:
    """Streams text as it comes when no tools are in play; with tools the whole text decides whether it is a
    call, so the items are sent when the generation ends (as chat holds its text back)."""

    done = b""  # the Responses stream ends with its last event, no [DONE]

    def __init__(
        self, request: ResponsesRequest, chat: ChatRender, response_id: str, created_at: int, on_done: OnDone | None = None
    ) -> None:
        self.request = request
        self.chat = chat
        self.response_id = response_id
        self.created_at = created_at
        self.on_done = on_done
        self.events = EventSequence()
        self.streams_text = chat.mode == "none"
        self.message_id = new_id("msg")
        self.started = False
        self.final: dict[str, Any] | None = None

    def _object(self, status: str, **fields: Any) -> dict[str, Any]:
        return response_object(self.request, self.response_id, self.created_at, status=status, **fields)

    def _head(self) -> list[dict[str, Any]]:
        if self.started:
            return []
        self.started = True
        head = self.events.start(self._object("in_progress"))
        if self.streams_text:
            head += self.events.message_start(self.message_id, 0)
        return head

    def _logprobs(self, positions: list[Position]) -> list[dict[str, Any]] | None:
        return chat_logprobs(positions)["content"] if self.request.logprobs is not None else None

    def chunks(self, delta: ChoiceDelta) -> list[dict[str, Any]]:
        events = self._head()
        # A token without text of its own (end of sequence, part of a character) still brings its logprob.
        carries_logprobs = bool(delta.logprobs) and self.request.logprobs is not None
        if self.streams_text and (delta.text or carries_logprobs):
            events.append(self.events.text_delta(self.message_id, 0, delta.text, self._logprobs(delta.logprobs)))
        return events

    def usage_chunk(self, acc: ChoiceAccumulator) -> dict[str, Any]:
        raise NotImplementedError("the Responses API reports usage in the response object")

    def result(self, acc: ChoiceAccumulator, completed_at: int) -> dict[str, Any]:
        """The finished response object, from the generation's whole text."""
        text, reason = acc.texts[0], acc.finish_reasons[0]
        content, calls = self.chat.split_tool_calls(text)
        output = output_items(content, calls, reason, self._logprobs(acc.logprobs[0]))
        if self.streams_text:
            output[0]["id"] = self.message_id
        status = "incomplete" if reason == "length" else "completed"
        tokens = (acc.prompt_tokens, acc.completion_tokens)
        return self._object(status, output=output, tokens=tokens, completed_at=completed_at)

    def response(self, acc: ChoiceAccumulator) -> dict[str, Any]:
        return self.final if self.final is not None else self.result(acc, self.created_at)

    # Wire
    def frame(self, payload: dict[str, Any]) -> bytes:
        return b"event: " + payload["type"].encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"

    def closing(self, acc: ChoiceAccumulator, completed_at: int | None = None) -> list[dict[str, Any]]:
        events = self._head()
        self.final = self.result(acc, completed_at or int(time.time()))
        for index, item in enumerate(self.final["output"]):
            if self.streams_text and index == 0:
                events += self.events.message_done(item, 0)
            else:
                events += self.events.item(item, index)
        events.append(self.events.finish(self.final))
        return events

    def failure(self, exc: OpenAIError) -> list[dict[str, Any]]:
        events = self._head()
        error = {"code": "server_error", "message": exc.message}
        events.append(self.events.finish(self._object("failed", error=error)))
        return events

    async def succeeded(self, acc: ChoiceAccumulator) -> None:
        if self.final is None:
            self.final = self.result(acc, int(time.time()))
        if self.on_done is not None:
            try:
                await self.on_done(self.final)
            except Exception:  # the answer is made: the client gets it, and the log says it was not kept
                log.exception("response %s could not be stored", self.response_id)
