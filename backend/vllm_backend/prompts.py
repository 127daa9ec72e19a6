"""A request's prompt, read from its tensors with the engine's tokenizer, and the context-length check.

Generation and tokenize-only requests read their prompt here, so a tokenize answer counts exactly the tokens a
generation of the same prompt would send to the engine.
"""

from __future__ import annotations

from typing import Any

from vllm_backend.chat import parse_messages, parse_template_kwargs, render_chat
from vllm_backend.request_fields import RequestError, scalar, tensor
from vllm_backend.tokenization import check_token_ids


def read_prompt(request: Any, tokenizer: Any, max_token_id: int) -> tuple[str, list[int]]:
    """The prompt's text and tokens. A rendered chat template carries its own special tokens, so `messages` get
    none added unless `add_special_tokens` says so; a text prompt gets them unless it says not to."""
    special = scalar(request, "add_special_tokens")
    text = scalar(request, "text_input")
    messages = scalar(request, "messages")
    token_ids = tensor(request, "prompt_token_ids")
    if token_ids is not None:
        if text is not None or messages is not None:
            raise RequestError("give one of text_input, messages or prompt_token_ids")
        ids = [int(i) for i in token_ids.reshape(-1)]
        if not ids:
            raise RequestError("prompt_token_ids is empty")
        check_token_ids(ids, max_token_id)
        return tokenizer.decode(ids), ids
    if messages is not None:
        if text is not None:
            raise RequestError("give either text_input or messages, not both")
        kwargs = parse_template_kwargs(scalar(request, "chat_template_kwargs"))
        prompt = render_chat(tokenizer, parse_messages(messages), kwargs)
        return prompt, tokenizer.encode(prompt, add_special_tokens=special is not None and bool(special))
    if text is None:
        raise RequestError("text_input is required (or messages, for a chat)")
    prompt = text.decode() if isinstance(text, bytes) else str(text)
    return prompt, tokenizer.encode(prompt, add_special_tokens=special is None or bool(special))


def check_length(limit: int, prompt_tokens: int, max_tokens: int | None) -> None:
    """Refuses a prompt, or a prompt plus its completion, longer than the model's context."""
    if prompt_tokens >= limit:
        raise RequestError(
            f"This model's maximum context length is {limit} tokens. However, your prompt has "
            f"{prompt_tokens} tokens. Please reduce the length of the prompt."
        )
    if max_tokens is not None and prompt_tokens + max_tokens > limit:
        raise RequestError(
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the prompt, {max_tokens} in the "
            "completion). Please reduce the length of the prompt or the completion."
        )
