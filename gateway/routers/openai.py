"""`/v1/completions` and `/v1/chat/completions`: validate, translate, call Triton, render."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, Protocol

import orjson
from fastapi import APIRouter, Depends
from fastapi.responses import ORJSONResponse
from sse_starlette import EventSourceResponse

from gateway.core import chat, completions
from gateway.core.choices import ChoiceAccumulator, ChoiceDelta
from gateway.core.upstream import GenerateChunk, GenerateRequest
from gateway.errors import OpenAIError
from gateway.protocol import ChatCompletionRequest, CompletionRequest
from gateway.routers.deps import resolve_model, triton
from gateway.triton_client import TritonClient

router = APIRouter(tags=["openai"])


class Render(Protocol):
    def chunk(self, delta: ChoiceDelta) -> dict[str, Any]: ...
    def usage_chunk(self, acc: ChoiceAccumulator) -> dict[str, Any]: ...
    def response(self, acc: ChoiceAccumulator) -> dict[str, Any]: ...


def _event(payload: dict[str, Any]) -> str:
    return orjson.dumps(payload).decode()


async def _sse(
    first: GenerateChunk | None,
    rest: AsyncIterator[GenerateChunk],
    render: Render,
    acc: ChoiceAccumulator,
    include_usage: bool,
) -> AsyncIterator[str]:
    try:
        if first is not None:
            for delta in acc.add(first):
                yield _event(render.chunk(delta))
        async for chunk in rest:
            for delta in acc.add(chunk):
                yield _event(render.chunk(delta))
        if include_usage:
            yield _event(render.usage_chunk(acc))
    except OpenAIError as exc:
        # Headers are gone: the error travels as an event, and the stream still ends properly.
        yield _event(exc.body())
    finally:
        await rest.aclose()
    yield "[DONE]"


async def _serve(
    client: TritonClient, upstream: GenerateRequest, render: Render, n: int, stream: bool, include_usage: bool
) -> Any:
    acc = ChoiceAccumulator(n)
    chunks = client.generate(upstream)
    if stream:
        # Wait for the first response so that errors before any output get a real HTTP status.
        try:
            first = await anext(chunks, None)
        except BaseException:
            await chunks.aclose()
            raise
        return EventSourceResponse(_sse(first, chunks, render, acc, include_usage), sep="\n")
    async for chunk in chunks:
        acc.add(chunk)
    return ORJSONResponse(render.response(acc))


def _new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


@router.post("/v1/completions")
async def create_completion(body: CompletionRequest, client: TritonClient = Depends(triton)) -> Any:
    model = await resolve_model(client, body.model)
    response_id = _new_id("cmpl")
    upstream = completions.to_generate_request(body, model, response_id)
    render = completions.CompletionRender(body, response_id, int(time.time()))
    return await _serve(client, upstream, render, body.n, body.stream, body.include_usage)


@router.post("/v1/chat/completions")
async def create_chat_completion(body: ChatCompletionRequest, client: TritonClient = Depends(triton)) -> Any:
    model = await resolve_model(client, body.model)
    response_id = _new_id("chatcmpl")
    upstream = chat.to_generate_request(body, model, response_id)
    render = chat.ChatRender(body, response_id, int(time.time()))
    return await _serve(client, upstream, render, body.n, body.stream, body.include_usage)
