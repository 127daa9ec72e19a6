"""Responses API items to the gateway's chat request, and a chat result back to output items (pure).

The Responses API is served by the chat path: the model's chat template renders the conversation, the chat tool
parsers read calls, structured outputs enforce `text.format`. Items are kept in one canonical form (the spec's
`ItemResource` shapes, each with an id) both in the store and here.
"""

from __future__ import annotations

import secrets
from typing import Any

from gateway.core.tools import ParsedToolCall, new_tool_call_id
from gateway.errors import bad_request
from gateway.protocol import ChatCompletionRequest
from gateway.responses.protocol import (
    FunctionCallItem,
    FunctionCallOutputItem,
    InputText,
    MessageItem,
    ResponsesRequest,
)


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(16)}"


def _text_of(content: str | list[InputText]) -> str:
    return content if isinstance(content, str) else "".join(part.text for part in content)


def output_text_part(text: str, logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}


def message_item(
    item_id: str, text: str, status: str = "completed", logprobs: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """An assistant message, as the model's output (`OutputMessage`)."""
    content = [output_text_part(text, logprobs)]
    return {"id": item_id, "type": "message", "role": "assistant", "status": status, "content": content}


def function_call_item(item_id: str, call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


def canonical_items(request: ResponsesRequest) -> list[dict[str, Any]]:
    """The request's input as stored items, each with an id."""
    if isinstance(request.input, str):
        return [_input_message(new_id("msg"), "user", request.input)]
    items = []
    for item in request.input:
        if isinstance(item, MessageItem):
            item_id = item.id or new_id("msg")
            text = _text_of(item.content)
            items.append(message_item(item_id, text) if item.role == "assistant" else _input_message(item_id, item.role, text))
        elif isinstance(item, FunctionCallItem):
            items.append(function_call_item(item.id or new_id("fc"), item.call_id, item.name, item.arguments))
        elif isinstance(item, FunctionCallOutputItem):
            output = item.output if isinstance(item.output, str) else _text_of(item.output)
            fco = {"id": item.id or new_id("fco"), "type": "function_call_output", "call_id": item.call_id}
            items.append({**fco, "output": output, "status": "completed"})
    return items


def _input_message(item_id: str, role: str, text: str) -> dict[str, Any]:
    content = [{"type": "input_text", "text": text}]
    return {"id": item_id, "type": "message", "role": role, "status": "completed", "content": content}


def chat_messages(instructions: str | None, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages for a conversation: function calls join the assistant turn before them."""
    messages: list[dict[str, Any]] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    for item in items:
        kind = item["type"]
        if kind == "message":
            text = "".join(part.get("text", "") for part in item["content"])
            messages.append({"role": item["role"], "content": text})
        elif kind == "function_call":
            call = {"id": item["call_id"], "type": "function", "function": {"name": item["name"], "arguments": item["arguments"]}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and "tool_call_id" not in last:
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": item["output"]})
    return messages


def _response_format(request: ResponsesRequest) -> dict[str, Any] | None:
    fmt = request.text.format if request.text else None
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return {"type": "json_object"}
    schema = {"name": fmt.name, "schema": fmt.schema_, "strict": fmt.strict}
    return {"type": "json_schema", "json_schema": schema}


def _tool_choice(request: ResponsesRequest) -> Any:
    choice = request.tool_choice
    if choice is None or isinstance(choice, str):
        return choice
    names = {tool.name for tool in request.tools or []}
    if choice.name not in names:
        raise bad_request(f"tool_choice names `{choice.name}`, which is not among the tools.", "tool_choice")
    return {"type": "function", "function": {"name": choice.name}}


def chat_request(request: ResponsesRequest, history: list[dict[str, Any]], inputs: list[dict[str, Any]]) -> ChatCompletionRequest:
    """The chat request that generates this response: `history` (earlier stored items) then this input."""
    messages = chat_messages(request.instructions, history + inputs)
    if not messages:
        raise bad_request("The request has no input to respond to.", "input")
    tools = [
        {"type": "function", "function": tool.model_dump(exclude_none=True, exclude={"type"})} for tool in request.tools or []
    ]
    body: dict[str, Any] = {
        "model": request.model,
        "messages": messages,
        "max_completion_tokens": request.max_output_tokens,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "tools": tools or None,
        "tool_choice": _tool_choice(request),
        "response_format": _response_format(request),
        "parallel_tool_calls": True if request.parallel_tool_calls is None else request.parallel_tool_calls,
        "user": request.user,
        "stream": request.stream,
        "logprobs": request.logprobs is not None or None,
        "top_logprobs": request.logprobs or None,
    }
    return ChatCompletionRequest.model_validate({key: value for key, value in body.items() if value is not None})


def output_items(
    content: str | None,
    calls: list[ParsedToolCall],
    finish_reason: str | None,
    logprobs: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """A chat choice's result as output items: the text as a message (with its tokens' logprobs when asked and
    the text is the whole output), then one item per tool call."""
    items = []
    if content or not calls:
        status = "incomplete" if finish_reason == "length" else "completed"
        items.append(message_item(new_id("msg"), content or "", status, None if calls else logprobs))
    for call in calls:
        items.append(function_call_item(new_id("fc"), new_tool_call_id(), call.name, call.arguments))
    return items
