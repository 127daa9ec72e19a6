"""`/v1/responses`: OpenAI's Responses API over the chat path (gateway/responses/), with stored responses."""

from __future__ import annotations

import time
from typing import Any, Literal

from fastapi import APIRouter, Depends, Query, Request

from gateway.admission import Admission, caller_of
from gateway.core import chat
from gateway.core.caps import check_chat, with_default_token_limit
from gateway.errors import OpenAIError, bad_request
from gateway.responses import objects, translate
from gateway.responses.protocol import ResponsesRequest, not_found
from gateway.responses.render import ResponsesRender
from gateway.responses.store import ChainTooLong, ResponseStore
from gateway.routers.deps import admission, request_id, resolve_model, triton
from gateway.routers.openai import Generation, _tool_parser, _tracker
from gateway.routing.fleet import Fleet

router = APIRouter(tags=["responses"])


def _store(request: Request) -> ResponseStore:
    return request.app.state.responses


def _owner(request: Request) -> str:
    return caller_of(request.scope).name


async def _history(request: Request, body: ResponsesRequest) -> list[dict[str, Any]]:
    if body.previous_response_id is None:
        return []
    try:
        history = await _store(request).conversation(_owner(request), body.previous_response_id)
    except ChainTooLong as exc:
        raise bad_request(str(exc), "previous_response_id") from None
    if history is None:
        error = not_found(body.previous_response_id)
        error.param = "previous_response_id"
        raise error
    return history


@router.post("/v1/responses")
async def create_response(
    body: ResponsesRequest,
    request: Request,
    client: Fleet = Depends(triton),
    gate: Admission = Depends(admission),
) -> Any:
    body.refuse_unsupported()
    inputs = translate.canonical_items(body)
    chat_body = translate.chat_request(body, await _history(request, body), inputs)
    try:
        check_chat(chat_body, request.app.state.caps)
    except OpenAIError as exc:  # named as the client named it
        exc.param = "max_output_tokens" if exc.param == "max_completion_tokens" else exc.param
        raise
    chat_body = with_default_token_limit(chat_body, request.app.state.caps)
    model = await resolve_model(request, body.model)
    upstream = chat.to_generate_request(chat_body, model, request_id(request))
    owner, store = _owner(request), _store(request)

    async def keep(response: dict[str, Any]) -> None:
        if body.store:
            await store.save(owner, response, inputs)

    chat_render = chat.ChatRender(chat_body, "", 0, _tool_parser(request, model))
    render = ResponsesRender(body, chat_render, translate.new_id("resp"), int(time.time()), keep)
    async with gate.slot(caller_of(request.scope), model) as slot:
        tracker = _tracker(request, model, "responses", body.stream, chat_body.messages)
        generation = Generation(client, [upstream], render, chat_body, tracker, body.logprobs, slot, wire=render)
        return await generation.respond(request)


@router.get("/v1/responses/{response_id}")
async def get_response(response_id: str, request: Request) -> Any:
    response = await _store(request).get(_owner(request), response_id)
    if response is None:
        raise not_found(response_id)
    return response


@router.delete("/v1/responses/{response_id}")
async def delete_response(response_id: str, request: Request) -> Any:
    if not await _store(request).delete(_owner(request), response_id):
        raise not_found(response_id)
    return objects.deleted(response_id)


@router.get("/v1/responses/{response_id}/input_items")
async def list_input_items(
    response_id: str,
    request: Request,
    limit: int = Query(20, ge=1, le=100),
    order: Literal["asc", "desc"] = "desc",
    after: str | None = None,
) -> Any:
    items = await _store(request).items(_owner(request), response_id)
    if items is None:
        raise not_found(response_id)
    try:
        return objects.item_page(items, limit, order, after)
    except ValueError as exc:
        raise bad_request(str(exc), "after") from None


@router.post("/v1/responses/{response_id}/cancel")
async def cancel_response(response_id: str, request: Request) -> Any:
    if await _store(request).get(_owner(request), response_id) is None:
        raise not_found(response_id)
    raise bad_request(
        "Only background responses can be cancelled, and this server does not run responses in the background "
        "(`background` is not supported).",
        "response_id",
    )
