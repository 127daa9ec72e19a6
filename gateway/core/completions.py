"""`/v1/completions`: OpenAI request to backend request, backend chunks to OpenAI objects."""

from __future__ import annotations

from typing import Any

from gateway.core.choices import ChoiceAccumulator, ChoiceDelta, usage
from gateway.core.logprobs import Position, completion_logprobs
from gateway.core.sampling import sampling_parameters
from gateway.core.upstream import GenerateRequest
from gateway.errors import bad_request
from gateway.protocol import CompletionRequest


Prompt = str | list[int]


def prompts_of(request: CompletionRequest) -> list[Prompt]:
    """A completion request may hold one prompt or several, each text or token ids."""
    prompt = request.prompt
    if isinstance(prompt, str):
        return [prompt]
    if prompt and isinstance(prompt[0], int):
        return [prompt]  # one prompt given as token ids
    return list(prompt)


def to_generate_requests(request: CompletionRequest, model: str, request_id: str) -> list[GenerateRequest]:
    """One backend request per prompt; the choices of prompt k are k*n ... k*n + n - 1."""
    if request.suffix:
        raise bad_request("suffix is not supported.", "suffix")
    if request.best_of is not None and request.best_of != request.n:
        raise bad_request("best_of other than n is not supported.", "best_of")
    prompts = prompts_of(request)
    if request.echo and any(not isinstance(p, str) for p in prompts):
        raise bad_request("echo needs text prompts.", "echo")
    if request.max_tokens == 0 and not request.echo:
        raise bad_request("max_tokens must be at least 1, got 0 (0 is for echo: the prompt alone).", "max_tokens")
    # With echo, max_tokens 0 asks for the prompt alone: the engine still generates one token, left out.
    sampling = sampling_parameters(request, 1 if request.max_tokens == 0 else request.max_tokens)
    if request.logprobs is not None:
        sampling["logprobs"] = request.logprobs
        if request.echo:  # the echoed prompt comes with its logprobs, as many alternatives per token
            sampling["prompt_logprobs"] = request.logprobs
    return [
        GenerateRequest(
            model=model,
            request_id=request_id if len(prompts) == 1 else f"{request_id}-{k}",
            sampling=sampling,
            stream=request.stream,
            text_input=prompt if isinstance(prompt, str) else None,
            prompt_token_ids=None if isinstance(prompt, str) else prompt,
            sparse_outputs=not request.continuous_usage,
        )
        for k, prompt in enumerate(prompts)
    ]


class CompletionRender:
    """Renders one completion's objects and stream chunks; the id and created time stay fixed.

    With `echo`, each choice's text starts with its prompt and its logprobs with the prompt's (the first prompt
    token's logprob null), `text_offset` counting from the prompt's start; `max_tokens` 0 leaves the prompt
    alone, without the token the engine generated."""

    def __init__(self, request: CompletionRequest, response_id: str, created: int) -> None:
        self.request = request
        self.base = {"id": response_id, "object": "text_completion", "created": created, "model": request.model}
        self.prompts = prompts_of(request)
        self.echo_pending = [request.echo] * (request.n * len(self.prompts))
        self.sent_chars = [0] * len(self.echo_pending)  # where the next streamed token starts, for text_offset
        self.prompt_only = request.echo and request.max_tokens == 0

    def _text(self, index: int, text: str) -> str:
        if self.echo_pending[index]:
            self.echo_pending[index] = False
            return str(self.prompts[index // self.request.n]) + text
        return text

    def _logprobs(
        self, prompt: list[Position], generated: list[Position], text_offset: int, echoed: int
    ) -> dict[str, Any] | None:
        """`echoed`: the characters of prompt text in front of the generated text; without the prompt's logprobs
        (a backend that does not return them) the first offset skips them."""
        if self.request.logprobs is None:
            return None
        return completion_logprobs(prompt + generated, text_offset + (0 if prompt else echoed))

    def chunks(self, delta: ChoiceDelta) -> list[dict[str, Any]]:
        generated, positions = ("", []) if self.prompt_only else (delta.text, delta.logprobs)
        prompt = delta.prompt_logprobs if self.echo_pending[delta.index] else []
        text = self._text(delta.index, generated)
        start = self.sent_chars[delta.index]
        self.sent_chars[delta.index] += len(text)
        echoed = len(text) - len(generated)
        choice = {
            "index": delta.index,
            "text": text,
            "logprobs": self._logprobs(prompt, positions, start, echoed),
            "finish_reason": delta.finish_reason,
        }
        chunk = {**self.base, "choices": [choice]}
        if self.request.include_usage:
            chunk["usage"] = None
        return [chunk]

    def usage_chunk(self, acc: ChoiceAccumulator) -> dict[str, Any]:
        return {**self.base, "choices": [], "usage": usage(acc.prompt_tokens, acc.completion_tokens)}

    def response(self, acc: ChoiceAccumulator) -> dict[str, Any]:
        choices = []
        for i, text in enumerate(acc.texts):
            generated, positions = ("", []) if self.prompt_only else (text, acc.logprobs[i])
            full = self._text(i, generated)
            prompt = acc.prompt_logprobs[i] if self.request.echo else []
            choices.append(
                {
                    "index": i,
                    "text": full,
                    "logprobs": self._logprobs(prompt, positions, 0, len(full) - len(generated)),
                    "finish_reason": acc.finish_reasons[i] or "stop",
                }
            )
        return {**self.base, "choices": choices, "usage": usage(acc.prompt_tokens, acc.completion_tokens)}
