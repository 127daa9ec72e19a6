"""What the gateway asks of the backend and what comes back, free of any client library."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class GenerateRequest:
    """One generation on one Triton model (one prompt, `n` sequences)."""

    model: str
    request_id: str
    sampling: dict[str, Any]
    stream: bool
    text_input: str | None = None
    prompt_token_ids: list[int] | None = None
    messages: list[dict[str, Any]] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    # Intermediate streamed responses without token counts (cheaper per token); usage in every chunk needs them.
    sparse_outputs: bool = True


@dataclass(slots=True)  # not frozen: made once per token, and a frozen __init__ costs three times as much
class GenerateChunk:
    """One backend response. Texts and token counts are deltas when streaming."""

    texts: list[str]
    finish_reasons: list[str | None] = field(default_factory=list)
    num_input_tokens: int | None = None
    num_output_tokens: list[int] = field(default_factory=list)
    final: bool = False
    request_id: str = ""  # the Triton request id the response answers
    logprobs: list[str] = field(default_factory=list)  # per sequence, the backend's JSON (see core.logprobs)
    prompt_logprobs: str | None = None  # the prompt's, in the same JSON; in the generation's first response only


def normalize_finish_reason(value: str | None) -> str | None:
    """The backend sends the string "None" on responses that do not finish a sequence."""
    if value in (None, "", "None", "none", "null"):
        return None
    return value


@dataclass(frozen=True)
class TokenizerCall:
    """A tokenize-only request: the backend reads the prompt as a generation would and answers from the model's
    tokenizer, without running the engine. Token ids in: detokenize; text or messages in: tokenize."""

    model: str
    request_id: str
    text_input: str | None = None
    prompt_token_ids: list[int] | None = None
    messages: list[dict[str, Any]] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    add_special_tokens: bool | None = None  # None: the backend's default for the prompt's form
    return_token_strs: bool = False
    model_version: str = ""  # "": the version Triton picks


@dataclass(frozen=True)
class TokenizerAnswer:
    """The prompt as text and as tokens, and the model's context length."""

    text: str
    token_ids: list[int]
    max_model_len: int
    token_strs: list[str] | None = None
