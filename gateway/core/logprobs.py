"""Token log-probabilities from the backend's JSON into OpenAI's two formats.

The backend sends, per sequence, a JSON list with one entry per new token:
`{token_id: {"logprob", "rank", "decoded_token"}}`, the sampled token first,
then the most likely tokens.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TokenLogprob:
    token: str
    logprob: float
    rank: int


@dataclass(frozen=True)
class Position:
    """One generated token: what was sampled and the most likely alternatives."""

    sampled: TokenLogprob
    top: tuple[TokenLogprob, ...]


def parse_positions(raw: str | None, top_k: int) -> list[Position]:
    if not raw or raw == "null":
        return []
    positions = []
    for entry in json.loads(raw):
        tokens = [
            TokenLogprob(info.get("decoded_token") or "", float(info["logprob"]), int(info.get("rank") or 0))
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


def completion_logprobs(positions: list[Position], text_offset: int) -> dict[str, Any]:
    """The legacy completions format; `text_offset` is where the first token starts in the choice's text."""
    offsets, offset = [], text_offset
    for position in positions:
        offsets.append(offset)
        offset += len(position.sampled.token)
    return {
        "tokens": [p.sampled.token for p in positions],
        "token_logprobs": [_safe(p.sampled.logprob) for p in positions],
        "top_logprobs": [{t.token: _safe(t.logprob) for t in p.top} for p in positions],
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
