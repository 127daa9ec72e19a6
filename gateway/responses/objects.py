"""Builders of the `response` object and its companions (pure)."""

from __future__ import annotations

from typing import Any

from gateway.responses.protocol import ResponsesRequest


def usage(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }


def _text(request: ResponsesRequest) -> dict[str, Any]:
    fmt = request.text.format if request.text else None
    if fmt is None:
        return {"format": {"type": "text"}}
    return {"format": fmt.model_dump(exclude_none=True, by_alias=True)}


def _tool_choice(request: ResponsesRequest) -> Any:
    choice = request.tool_choice
    if choice is None:
        return "auto"
    return choice if isinstance(choice, str) else choice.model_dump()


def _tools(request: ResponsesRequest) -> list[dict[str, Any]]:
    return [
        {"type": "function", "name": t.name, "description": t.description, "parameters": t.parameters, "strict": t.strict}
        for t in request.tools or []
    ]


def response_object(
    request: ResponsesRequest,
    response_id: str,
    created_at: int,
    *,
    status: str,
    output: list[dict[str, Any]] | None = None,
    tokens: tuple[int, int] | None = None,
    error: dict[str, str] | None = None,
    completed_at: int | None = None,
) -> dict[str, Any]:
    """The response object in any state: `in_progress` (no output yet), `completed`, `incomplete` (the token limit
    was reached) or `failed` (with `error`)."""
    incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
    response = {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "completed_at": completed_at if status == "completed" else None,
        "error": error,
        "incomplete_details": incomplete,
        "instructions": request.instructions,
        "max_output_tokens": request.max_output_tokens,
        "model": request.model,
        "output": output or [],
        "parallel_tool_calls": True if request.parallel_tool_calls is None else request.parallel_tool_calls,
        "previous_response_id": request.previous_response_id,
        "reasoning": None,
        "store": request.store,
        "temperature": 1.0 if request.temperature is None else request.temperature,
        "text": _text(request),
        "tool_choice": _tool_choice(request),
        "tools": _tools(request),
        "top_p": 1.0 if request.top_p is None else request.top_p,
        "truncation": "disabled",
        "metadata": request.metadata or {},
    }
    # OpenAI's examples show `usage: null` and `user: null`, but its schema makes neither nullable: left out
    # when there is nothing to say, which the schema and the SDKs both accept.
    if tokens is not None:
        response["usage"] = usage(*tokens)
    if request.user is not None:
        response["user"] = request.user
    if request.top_logprobs is not None:
        response["top_logprobs"] = request.top_logprobs
    return response


def deleted(response_id: str) -> dict[str, Any]:
    return {"id": response_id, "object": "response", "deleted": True}


def item_page(items: list[dict[str, Any]], limit: int, order: str, after: str | None) -> dict[str, Any]:
    """One page of a response's input items (`ResponseItemList`), in `order` over the input order, starting after
    the item with id `after`. Raises ValueError when `after` is not one of the items."""
    ordered = items if order == "asc" else list(reversed(items))
    if after is not None:
        ids = [item["id"] for item in ordered]
        if after not in ids:
            raise ValueError(f"`{after}` is not an input item of this response")
        ordered = ordered[ids.index(after) + 1 :]
    page = ordered[:limit]
    return {
        "object": "list",
        "data": page,
        "has_more": len(ordered) > limit,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
    }
