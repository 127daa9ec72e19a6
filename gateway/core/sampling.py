"""OpenAI sampling fields to vLLM SamplingParams fields (sent to the backend as JSON)."""

from __future__ import annotations

from typing import Any

from gateway.protocol import SamplingFields

# OpenAI/vLLM request field -> SamplingParams field, copied when set.
_PASSTHROUGH = (
    "temperature",
    "top_p",
    "n",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "top_k",
    "min_p",
    "repetition_penalty",
    "min_tokens",
    "ignore_eos",
    "stop_token_ids",
)


def sampling_parameters(request: SamplingFields, max_tokens: int | None) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for name in _PASSTHROUGH:
        value = getattr(request, name)
        if value is not None:
            params[name] = value
    if request.stop:
        params["stop"] = request.stop
    # Always sent: null means "until the context is full", rather than the engine's default of 16.
    params["max_tokens"] = max_tokens
    return params
