"""Token log-probabilities from the backend's JSON into OpenAI's two formats.

The backend sends, per sequence, a JSON list with one entry per new token:
`{token_id: {"logprob", "rank", "decoded_token"}}`, the sampled token first,
then the most likely tokens. The prompt's logprobs come in the same form, the
prompt's own token first; the first prompt token has a null logprob (nothing
precedes it to predict it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TokenLogprob:
    token: str
    logprob: float | None  # None: the prompt's first token, which nothing predicts
    rank: int


@dataclass(frozen=True)
class Position:
    """One token, generated or of the prompt: the token itself and the most likely alternatives."""

    sampled: TokenLogprob
    top: tuple[TokenLogprob, ...]


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def parse_positions(raw: str | None, top_k: int) -> list[Position]:
    if not raw or raw == "null":
        return []
    positions = []
    for entry in json.loads(raw):
        tokens = [
            TokenLogprob(info.get("decoded_token") or "", _number(info.get("logprob")), int(info.get("rank") or 0))
            for info in entry.values()
        ]
        if not tokens:
            continue
        top = sorted((t for t in tokens if 0 < t.rank <= top_k), key=lambda t: t.rank)
        positions.append(Position(tokens[0], tuple(top)))
    return positions


def _safe(value: float) -> float:
    # JSON has no -inf; OpenAI clients expect a number.
    return max(value, -9999.0)


def _completion_top(position: Position) -> dict[str, float] | None:
    """The chosen token (sampled, or the prompt's own) and the most likely ones: up to `logprobs` + 1 entries, as
    OpenAI documents and vLLM's server does. A token without a logprob (the echoed prompt's first) has no
    alternatives either: null, as OpenAI's echo."""
    chosen = position.sampled
    if chosen.logprob is None:
        return None
    top = {t.token: _safe(t.logprob) for t in position.top if t.logprob is not None}
    return {chosen.token: _safe(chosen.logprob), **top}


def completion_logprobs(positions: list[Position], text_offset: int) -> dict[str, Any]:
    """The legacy completions format; `text_offset` is where the first token starts in the choice's text."""
    offsets, offset = [], text_offset
    for position in positions:
        offsets.append(offset)
        offset += len(position.sampled.token)
    return {
        "tokens": [p.sampled.token for p in positions],
        "token_logprobs": [None if p.sampled.logprob is None else _safe(p.sampled.logprob) for p in positions],
        "top_logprobs": [_completion_top(p) for p in positions],
        "text_offset": offsets,
    }


def _chat_token(token: TokenLogprob) -> dict[str, Any]:
    return {"token": token.token, "logprob": _safe(token.logprob), "bytes": list(token.token.encode())}


def chat_logprobs(positions: list[Position]) -> dict[str, Any]:
    return {
        "content": [
            {**_chat_token(p.sampled), "top_logprobs": [_chat_token(t) for t in p.top]} for p in positions
        ],
        "refusal": None,
    }
