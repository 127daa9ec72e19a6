"""Chat messages to a prompt, rendered by the engine's own tokenizer and chat template."""

from __future__ import annotations

import json
from typing import Any


class ChatError(ValueError):
    """Messages the chat template cannot render."""


def parse_messages(raw: str | bytes) -> list[dict[str, Any]]:
    try:
        messages = json.loads(raw)
    except ValueError as exc:
        raise ChatError(f"messages is not valid JSON: {exc}") from None
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise ChatError("messages must be a non-empty JSON list of objects")
    return messages


def parse_template_kwargs(raw: str | bytes | None) -> dict[str, Any]:
    if raw is None:
        return {}
    try:
        kwargs = json.loads(raw)
    except ValueError as exc:
        raise ChatError(f"chat_template_kwargs is not valid JSON: {exc}") from None
    if not isinstance(kwargs, dict):
        raise ChatError("chat_template_kwargs must be a JSON object")
    return kwargs


def render_chat(tokenizer: Any, messages: list[dict[str, Any]], template_kwargs: dict[str, Any]) -> str:
    kwargs = {"add_generation_prompt": True, **template_kwargs}
    try:
        return tokenizer.apply_chat_template(messages, tokenize=False, **kwargs)
    except Exception as exc:  # the template is user-supplied Jinja: any error is the request's
        raise ChatError(f"cannot apply the chat template: {exc}") from None
