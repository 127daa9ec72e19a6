"""`/v1/completions`: OpenAI request to backend request, backend chunks to OpenAI objects."""

from __future__ import annotations

from typing import Any

from gateway.core.choices import ChoiceAccumulator, ChoiceDelta, usage
from gateway.core.sampling import sampling_parameters
from gateway.core.upstream import GenerateRequest
from gateway.errors import bad_request
from gateway.protocol import CompletionRequest


def to_generate_request(request: CompletionRequest, model: str, request_id: str) -> GenerateRequest:
    if request.suffix:
        raise bad_request("suffix is not supported.", "suffix")
    if request.best_of is not None and request.best_of != request.n:
        raise bad_request("best_of other than n is not supported.", "best_of")
    prompt = request.prompt
    if isinstance(prompt, list):
        if len(prompt) != 1:
            raise bad_request("Only one prompt per request is supported.", "prompt")
        prompt = prompt[0]
    return GenerateRequest(
        model=model,
        request_id=request_id,
        sampling=sampling_parameters(request, request.max_tokens),
        stream=request.stream,
        text_input=prompt,
    )


def _prompt_of(request: CompletionRequest) -> str:
    return request.prompt if isinstance(request.prompt, str) else request.prompt[0]


class CompletionRender:
    """Renders one completion's objects and stream chunks; the id and created time stay fixed."""

    def __init__(self, request: CompletionRequest, response_id: str, created: int) -> None:
        self.request = request
        self.base = {"id": response_id, "object": "text_completion", "created": created, "model": request.model}
        self.echo_pending = [request.echo] * request.n

    def _text(self, index: int, text: str) -> str:
        if self.echo_pending[index]:
            self.echo_pending[index] = False
            return _prompt_of(self.request) + text
        return text

    def chunk(self, delta: ChoiceDelta) -> dict[str, Any]:
        choice = {
            "index": delta.index,
            "text": self._text(delta.index, delta.text),
            "logprobs": None,
            "finish_reason": delta.finish_reason,
        }
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
                "text": self._text(i, text),
                "logprobs": None,
                "finish_reason": acc.finish_reasons[i] or "stop",
            }
            for i, text in enumerate(acc.texts)
        ]
        return {**self.base, "choices": choices, "usage": usage(acc.prompt_tokens, acc.completion_tokens)}
