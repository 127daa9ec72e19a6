"""`/v1/chat/completions`: OpenAI chat request to backend request, chunks to OpenAI objects.

The backend renders the messages with the model's own chat template, so the
gateway only normalizes them into plain JSON the template understands.
"""

from __future__ import annotations

from typing import Any, Literal

from gateway.core.choices import ChoiceAccumulator, ChoiceDelta, usage
from gateway.core.logprobs import chat_logprobs
from gateway.core.sampling import sampling_parameters
from gateway.core.tools import (
    ParsedToolCall,
    ToolCallParser,
    openai_tool_calls,
    parse_forced_tool_calls,
    tool_calls_schema,
)
from gateway.core.upstream import GenerateRequest
from gateway.errors import bad_request
from gateway.protocol import ChatCompletionRequest, ChatMessage, TextPart

ToolMode = Literal["none", "auto", "forced"]


def _content_text(message: ChatMessage, position: int) -> str | None:
    content = message.content
    if content is None or isinstance(content, str):
        return content
    texts = []
    for part in content:
        if not isinstance(part, TextPart):
            raise bad_request("This model does not accept image inputs.", f"messages.{position}.content")
        texts.append(part.text)
    return "\n".join(texts)


def template_messages(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """Plain message dicts for a chat template. `developer` is OpenAI's new name for `system`."""
    rendered = []
    for position, message in enumerate(messages):
        item: dict[str, Any] = {
            "role": "system" if message.role == "developer" else message.role,
            "content": _content_text(message, position) or "",
        }
        for key in ("name", "tool_calls", "tool_call_id"):
            value = getattr(message, key)
            if value is not None:
                item[key] = value
        rendered.append(item)
    return rendered


def tool_mode(request: ChatCompletionRequest) -> ToolMode:
    if not request.tools or request.tool_choice == "none":
        if request.tool_choice not in (None, "none", "auto"):
            raise bad_request("tool_choice needs tools.", "tool_choice")
        return "none"
    return "auto" if request.tool_choice in (None, "auto") else "forced"


def _structured_outputs(request: ChatCompletionRequest, mode: ToolMode) -> dict[str, Any] | None:
    if mode == "forced":
        tools = [tool.model_dump(exclude_none=True) for tool in request.tools or []]
        choice = request.tool_choice
        choice = choice if isinstance(choice, str) else choice.model_dump()
        try:
            return {"json": tool_calls_schema(tools, choice, request.parallel_tool_calls)}
        except ValueError as exc:
            raise bad_request(str(exc), "tool_choice") from None
    fmt = request.response_format
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return {"json_object": True}
    if fmt.json_schema is None:
        raise bad_request("response_format json_schema needs a json_schema object.", "response_format")
    return {"json": fmt.json_schema.schema_}


def to_generate_request(request: ChatCompletionRequest, model: str, request_id: str) -> GenerateRequest:
    mode = tool_mode(request)
    sampling = sampling_parameters(request, request.token_limit)
    if request.top_logprobs is not None and not request.logprobs:
        raise bad_request("top_logprobs needs logprobs set to true.", "top_logprobs")
    if request.logprobs_top is not None:
        sampling["logprobs"] = request.logprobs_top
    structured = _structured_outputs(request, mode)
    if structured is not None:
        sampling["structured_outputs"] = structured
    template_kwargs = dict(request.chat_template_kwargs or {})
    if mode != "none":
        template_kwargs["tools"] = [tool.model_dump(exclude_none=True) for tool in request.tools or []]
    return GenerateRequest(
        model=model,
        request_id=request_id,
        sampling=sampling,
        stream=request.stream,
        messages=template_messages(request.messages),
        chat_template_kwargs=template_kwargs or None,
        sparse_outputs=not request.continuous_usage,
    )


class ChatRender:
    """Renders one chat completion's objects and stream chunks; the id and created time stay fixed.

    With tools, a choice's text is held back until it is complete, because only the
    whole text tells whether it is a tool call.
    """

    def __init__(
        self, request: ChatCompletionRequest, response_id: str, created: int, parser: ToolCallParser | None = None
    ) -> None:
        self.request = request
        self.mode = tool_mode(request)
        self.parser = parser
        self.base = {"id": response_id, "object": "chat.completion.chunk", "created": created, "model": request.model}
        self.role_sent = [False] * request.n
        self.held = [""] * request.n

    def split_tool_calls(self, text: str) -> tuple[str | None, list[ParsedToolCall]]:
        """The content and the tool calls in a choice's whole text (also used by the Responses API)."""
        if self.mode == "forced":
            try:
                return None, parse_forced_tool_calls(text)
            except ValueError:  # cut short (e.g. by max_tokens): what was generated is the content
                return text, []
        if self.mode == "auto" and self.parser is not None:
            return self.parser(text)
        return text, []

    def _chunk(
        self, index: int, message: dict[str, Any], finish_reason: str | None, logprobs: dict | None = None
    ) -> dict[str, Any]:
        if not self.role_sent[index]:
            # The role travels with the first generated text so time-to-first-token stays honest.
            self.role_sent[index] = True
            message = {"role": "assistant", **message}
        choice = {"index": index, "delta": message, "logprobs": logprobs, "finish_reason": finish_reason}
        chunk = {**self.base, "choices": [choice]}
        if self.request.include_usage:
            chunk["usage"] = None
        return chunk

    def chunks(self, delta: ChoiceDelta) -> list[dict[str, Any]]:
        if self.mode == "none":
            message = {"content": delta.text} if delta.text or delta.finish_reason is None else {}
            logprobs = chat_logprobs(delta.logprobs) if self.request.logprobs else None
            return [self._chunk(delta.index, message, delta.finish_reason, logprobs)]
        self.held[delta.index] += delta.text
        if delta.finish_reason is None:
            return []
        content, calls = self.split_tool_calls(self.held[delta.index])
        message: dict[str, Any] = {}
        if content:
            message["content"] = content
        if calls:
            message["tool_calls"] = [{"index": i, **call} for i, call in enumerate(openai_tool_calls(calls))]
        return [self._chunk(delta.index, message, "tool_calls" if calls else delta.finish_reason)]

    def usage_chunk(self, acc: ChoiceAccumulator) -> dict[str, Any]:
        return {**self.base, "choices": [], "usage": usage(acc.prompt_tokens, acc.completion_tokens)}

    def _choice(self, index: int, text: str, finish_reason: str | None, acc: ChoiceAccumulator) -> dict[str, Any]:
        content, calls = self.split_tool_calls(text)
        logprobs = chat_logprobs(acc.logprobs[index]) if self.request.logprobs else None
        message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
        if calls:
            message["tool_calls"] = openai_tool_calls(calls)
            finish_reason = "tool_calls"
        return {"index": index, "message": message, "logprobs": logprobs, "finish_reason": finish_reason or "stop"}

    def response(self, acc: ChoiceAccumulator) -> dict[str, Any]:
        return {
            **self.base,
            "object": "chat.completion",
            "choices": [self._choice(i, text, acc.finish_reasons[i], acc) for i, text in enumerate(acc.texts)],
            "usage": usage(acc.prompt_tokens, acc.completion_tokens),
        }
