"""`/v1/completions` and `/v1/chat/completions`: validate, translate, call Triton, render."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any, Protocol

import orjson
from fastapi import APIRouter, Depends, Request

from gateway.admission import Admission, Slot, caller_of
from gateway.core import chat, completions
from gateway.core.caps import Caps, check_chat, check_completion, with_default_token_limit
from gateway.core.choices import ChoiceAccumulator, ChoiceDelta, usage
from gateway.core.tools import ToolCallParser, tool_call_parser
from gateway.core.upstream import GenerateChunk, GenerateRequest
from gateway.errors import JSONBytesResponse, OpenAIError
from gateway.observability.request_context import request_record
from gateway.observability.tracker import GenerationTracker
from gateway.protocol import ChatCompletionRequest, CompletionRequest, SamplingFields
from gateway.routers.deps import admission, request_id, resolve_model, triton
from gateway.routers.disconnects import DisconnectWatch, EventStreamResponse
from gateway.streams import coalesced, merge
from gateway.routing.fleet import Fleet

router = APIRouter(tags=["openai"])


class Render(Protocol):
    def chunks(self, delta: ChoiceDelta) -> list[dict[str, Any]]: ...
    def usage_chunk(self, acc: ChoiceAccumulator) -> dict[str, Any]: ...
    def response(self, acc: ChoiceAccumulator) -> dict[str, Any]: ...


class Wire(Protocol):
    """How a stream is framed and ended, and what runs once a generation succeeded: a hook for endpoints whose
    stream differs from chat's (the Responses API names its events and sends no [DONE])."""

    done: bytes

    def frame(self, payload: dict[str, Any]) -> bytes: ...
    def closing(self, acc: ChoiceAccumulator) -> list[dict[str, Any]]: ...
    def failure(self, exc: OpenAIError) -> list[dict[str, Any]]: ...
    async def succeeded(self, acc: ChoiceAccumulator) -> None: ...


_DONE = b"data: [DONE]\n\n"
# Server-sent events, written as plain framed bytes: one send per event and no per-event
# task or timeout, which a profile showed to cost more than the rest of the gateway.
_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def _event(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


class ChatWire:
    """Chat and completions: `data:` events, the usage chunk when asked for, then [DONE]."""

    done = _DONE

    def __init__(self, render: Render, body: SamplingFields) -> None:
        self.render = render
        self.body = body

    def frame(self, payload: dict[str, Any]) -> bytes:
        return _event(payload)

    def closing(self, acc: ChoiceAccumulator) -> list[dict[str, Any]]:
        return [self.render.usage_chunk(acc)] if self.body.include_usage else []

    def failure(self, exc: OpenAIError) -> list[dict[str, Any]]:
        return [exc.body()]

    async def succeeded(self, acc: ChoiceAccumulator) -> None:
        return None


def _outcome(exc: OpenAIError) -> str:
    return "client_error" if exc.status < 500 else "server_error"


class Generation:
    """One request's path through Triton, streamed or not, with its tracking."""

    def __init__(
        self,
        client: Fleet,
        upstreams: list[GenerateRequest],
        render: Render,
        body: SamplingFields,
        tracker: GenerationTracker,
        top_logprobs: int | None,
        slot: Slot,
        wire: Wire | None = None,
    ) -> None:
        self.client = client
        self.wire = wire or ChatWire(render, body)
        self.slot = slot
        if slot.counts_tokens:  # every response carries counts, so that a stream cut short is counted too
            upstreams = [replace(upstream, sparse_outputs=False) for upstream in upstreams]
        self.upstreams = upstreams
        self.render = render
        self.body = body
        self.tracker = tracker
        self.acc = ChoiceAccumulator(body.n * len(upstreams), top_logprobs)
        self.continuous_usage = body.continuous_usage
        self._tail = b""  # a stream's last events, written with [DONE]

    def _chunks(self) -> AsyncIterator[tuple[int, GenerateChunk]]:
        streams = [self.client.generate(upstream) for upstream in self.upstreams]
        if self.body.stream:  # what piled up while the writer was busy goes out as one event per choice
            streams = [coalesced(stream) for stream in streams]
        return merge(streams)

    def _payloads(self, item: tuple[int, GenerateChunk]) -> list[dict[str, Any]]:
        payloads = [payload for delta in self._deltas(item) for payload in self.render.chunks(delta)]
        if self.continuous_usage:
            for payload in payloads:
                payload["usage"] = usage(self.acc.prompt_tokens, self.acc.completion_tokens)
        return payloads

    def _deltas(self, item: tuple[int, GenerateChunk]) -> list[ChoiceDelta]:
        position, chunk = item
        if chunk.request_id:
            self.tracker.upstream_id(chunk.request_id)
        deltas = self.acc.add(chunk, offset=position * self.body.n)
        if any(d.text for d in deltas):
            self.tracker.on_text()
        return deltas

    def _finish(self, outcome: str, error_type: str | None = None) -> None:
        self.slot.count(self.acc.prompt_tokens + self.acc.completion_tokens)
        self.tracker.finish(
            outcome, self.acc.prompt_tokens, self.acc.completion_tokens, error_type, output="".join(self.acc.texts)
        )

    async def respond(self, request: Request) -> Any:
        try:
            if self.body.stream:
                return await self._stream()
            return await self._complete(request)
        except OpenAIError as exc:
            self._finish(_outcome(exc), exc.type)
            raise
        except asyncio.CancelledError:
            self._finish("disconnected")
            raise

    async def _stream(self) -> EventStreamResponse:
        chunks = self._chunks()
        # Wait for the first response so that errors before any output get a real HTTP status.
        try:
            first = await anext(chunks, None)
        except BaseException:
            await chunks.aclose()
            raise
        events = self._events(first, chunks)
        return EventStreamResponse(events, headers=_SSE_HEADERS, on_close=self._closer(events))

    def _closer(self, events: AsyncIterator[bytes]) -> Callable[[], Awaitable[None]]:
        """What runs when the response ends, however it ends. A stream cut short by its client is closed here
        and not when it is collected: its Triton request is cancelled and its tokens counted, then the slot
        is freed."""
        release = self.slot.hand_over()

        async def close() -> None:
            await events.aclose()  # type: ignore[attr-defined]
            await release()

        return close

    def _frames(self, item: tuple[int, GenerateChunk]) -> bytes:
        """The events of one backend response, framed and joined: one write, whatever the choices. The last
        response's events are held back, to go out with the usage chunk and [DONE] in the stream's last write."""
        frames = b"".join([self.wire.frame(payload) for payload in self._payloads(item)])
        if item[1].final and len(self.upstreams) == 1:
            self._tail = frames
            return b""
        return frames

    async def _events(
        self, first: tuple[int, GenerateChunk] | None, rest: AsyncIterator[tuple[int, GenerateChunk]]
    ) -> AsyncIterator[bytes]:
        try:
            if first is not None and (frames := self._frames(first)):
                yield frames
            async for item in rest:
                if frames := self._frames(item):
                    yield frames
            self._tail += b"".join([self.wire.frame(payload) for payload in self.wire.closing(self.acc)])
            self._finish("ok")
            await self.wire.succeeded(self.acc)
        except OpenAIError as exc:
            # Headers are gone: the error travels as an event, and the stream still ends properly.
            self._finish(_outcome(exc), exc.type)
            self._tail += b"".join([self.wire.frame(payload) for payload in self.wire.failure(exc)])
        except (asyncio.CancelledError, GeneratorExit):
            self._finish("disconnected")
            raise
        finally:
            await rest.aclose()
        await self.slot.release()  # before the last write, so the client's next request sees the tokens counted
        yield self._tail + self.wire.done

    async def _complete(self, request: Request) -> JSONBytesResponse:
        async with DisconnectWatch(request.receive) as watch:
            async for item in self._chunks():
                self._deltas(item)
        if watch.disconnected:  # the generation in Triton was stopped by closing its stream
            self._finish("disconnected")
            return JSONBytesResponse(OpenAIError(499, "client disconnected").body(), status_code=499)
        self._finish("ok")
        await self.wire.succeeded(self.acc)
        return JSONBytesResponse(self.render.response(self.acc))


def _tracker(request: Request, model: str, endpoint: str, stream: bool, prompt: Any) -> GenerationTracker:
    record = request_record(request.scope)
    if record is not None:
        record.stream = stream
        record.prompt = prompt  # logged only with GATEWAY_LOG_CONTENT
    return GenerationTracker(request.app.state.llm_metrics, record, model, endpoint)


def _tool_parser(request: Request, model: str) -> ToolCallParser:
    settings = request.app.state.settings
    return tool_call_parser(settings.tool_call_parsers.get(model, settings.tool_call_parser))


@router.post("/v1/completions")
async def create_completion(
    body: CompletionRequest,
    request: Request,
    client: Fleet = Depends(triton),
    gate: Admission = Depends(admission),
) -> Any:
    caps: Caps = request.app.state.caps
    check_completion(body, len(completions.prompts_of(body)), caps)
    body = with_default_token_limit(body, caps)
    model = await resolve_model(request, body.model)
    upstreams = completions.to_generate_requests(body, model, request_id(request))
    render = completions.CompletionRender(body, f"cmpl-{uuid.uuid4().hex}", int(time.time()))
    async with gate.slot(caller_of(request.scope), model) as slot:
        tracker = _tracker(request, model, "completions", body.stream, body.prompt)
        return await Generation(client, upstreams, render, body, tracker, body.logprobs, slot).respond(request)


@router.post("/v1/chat/completions")
async def create_chat_completion(
    body: ChatCompletionRequest,
    request: Request,
    client: Fleet = Depends(triton),
    gate: Admission = Depends(admission),
) -> Any:
    caps: Caps = request.app.state.caps
    check_chat(body, caps)
    body = with_default_token_limit(body, caps)
    model = await resolve_model(request, body.model)
    upstream = chat.to_generate_request(body, model, request_id(request))
    render = chat.ChatRender(body, f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), _tool_parser(request, model))
    async with gate.slot(caller_of(request.scope), model) as slot:
        tracker = _tracker(request, model, "chat", body.stream, body.messages)
        return await Generation(client, [upstream], render, body, tracker, body.logprobs_top, slot).respond(request)
