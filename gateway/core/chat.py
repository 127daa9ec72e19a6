"""`/v1/chat/completions`: OpenAI chat request to backend request, chunks to OpenAI objects.

The backend renders the messages with the model's own chat template, so the
gateway only normalizes them into plain JSON the template understands.
"""

from __future__ import annotations

from typing import Any

from gateway.core.choices import ChoiceAccumulator, ChoiceDelta, usage
from gateway.core.sampling import sampling_parameters
from gateway.core.upstream import GenerateRequest
from gateway.errors import bad_request
from gateway.protocol import ChatCompletionRequest, ChatMessage, TextPart


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


def to_generate_request(request: ChatCompletionRequest, model: str, request_id: str) -> GenerateRequest:
    return GenerateRequest(
        model=model,
        request_id=request_id,
        sampling=sampling_parameters(request, request.token_limit),
        stream=request.stream,
        messages=template_messages(request.messages),
        chat_template_kwargs=request.chat_template_kwargs,
    )


class ChatRender:
    """Renders one chat completion's objects and stream chunks; the id and created time stay fixed."""

    def __init__(self, request: ChatCompletionRequest, response_id: str, created: int) -> None:
        self.request = request
        self.base = {"id": response_id, "object": "chat.completion.chunk", "created": created, "model": request.model}
        self.role_sent = [False] * request.n

    def chunk(self, delta: ChoiceDelta) -> dict[str, Any]:
        message: dict[str, Any] = {}
        if not self.role_sent[delta.index]:
            # The role travels with the first generated text so time-to-first-token stays honest.
            self.role_sent[delta.index] = True
            message["role"] = "assistant"
        if delta.text or delta.finish_reason is None:
            message["content"] = delta.text
        choice = {"index": delta.index, "delta": message, "logprobs": None, "finish_reason": delta.finish_reason}
        chunk = {**self.base, "choices": [choice]}
        if self.request.include_usage:
            chunk["usage"] = None
        return chunk

    def usage_chunk(self, acc: ChoiceAccumulator) -> dict[str, Any]:
        return {**self.base, "choices": [], "usage": usage(acc.prompt_tokens, acc.completion_tokens)}

    def response(self, acc: ChoiceAccumulator) -> dict[str, Any]:
        choices = [
            {
                "index": i,
                "message": {"role": "assistant", "content": text, "refusal": None},
                "logprobs": None,
                "finish_reason": acc.finish_reasons[i] or "stop",
            }
            for i, text in enumerate(acc.texts)
        ]
        return {
            **self.base,
            "object": "chat.completion",
            "choices": choices,
            "usage": usage(acc.prompt_tokens, acc.completion_tokens),
        }
