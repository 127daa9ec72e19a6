"""Operator caps on what one request may ask for: `n`, the token limit and the prompts of a list.

Pure: the router checks a parsed request against the caps before anything reaches Triton.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from gateway.errors import OpenAIError, bad_request
from gateway.protocol import ChatCompletionRequest, CompletionRequest

Request = TypeVar("Request", CompletionRequest, ChatCompletionRequest)


@dataclass(frozen=True)
class Caps:
    """None leaves a cap off."""

    max_n: int | None = None
    max_tokens: int | None = None
    max_prompts: int | None = None


def _over(param: str, value: int, cap: int) -> OpenAIError:
    return bad_request(f"{param} is {value}, above this server's limit of {cap}.", param)


def _check_token_limit(param: str, value: int | None, caps: Caps) -> None:
    if caps.max_tokens is not None and value is not None and value > caps.max_tokens:
        raise _over(param, value, caps.max_tokens)


def check_completion(request: CompletionRequest, prompt_count: int, caps: Caps) -> None:
    """Raises a 400 naming the first parameter above its cap."""
    if caps.max_n is not None and request.n > caps.max_n:
        raise _over("n", request.n, caps.max_n)
    _check_token_limit("max_tokens", request.max_tokens, caps)
    if caps.max_prompts is not None and prompt_count > caps.max_prompts:
        raise bad_request(
            f"prompt holds {prompt_count} prompts, above this server's limit of {caps.max_prompts}.", "prompt"
        )


def check_chat(request: ChatCompletionRequest, caps: Caps) -> None:
    """Raises a 400 naming the first parameter above its cap."""
    if caps.max_n is not None and request.n > caps.max_n:
        raise _over("n", request.n, caps.max_n)
    _check_token_limit("max_tokens", request.max_tokens, caps)
    _check_token_limit("max_completion_tokens", request.max_completion_tokens, caps)


def with_default_token_limit(request: Request, caps: Caps) -> Request:
    """The request, given the token cap as its limit when it set none: with a cap, "until the context is
    full" means up to the cap."""
    if caps.max_tokens is None:
        return request
    if isinstance(request, ChatCompletionRequest):
        if request.token_limit is not None:
            return request
        return request.model_copy(update={"max_completion_tokens": caps.max_tokens})
    if request.max_tokens is not None:
        return request
    return request.model_copy(update={"max_tokens": caps.max_tokens})
