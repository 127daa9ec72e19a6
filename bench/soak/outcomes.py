"""What one soak request ended as, judged from what its client saw (no I/O here).

A request must end complete (exactly `max_tokens` tokens; a stream well formed and ending in [DONE]) or with an
explicit error (a status >= 400 with OpenAI's error body, or an error event then [DONE]). Anything else is a
failure: a hang, a stream cut without an error event, a wrong token count, a malformed body.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Outcome(StrEnum):
    COMPLETE = "complete"
    ERROR_STATUS = "error_status"
    ERROR_EVENT = "error_event"
    CLIENT_DISCONNECT = "client_disconnect"  # the client left on purpose: counted apart
    # failures
    HUNG = "hung"
    TRUNCATED = "truncated"
    WRONG_COUNT = "wrong_count"
    MALFORMED = "malformed"
    CONNECTION_LOST = "connection_lost"


FAILURES = frozenset({Outcome.HUNG, Outcome.TRUNCATED, Outcome.WRONG_COUNT, Outcome.MALFORMED, Outcome.CONNECTION_LOST})

_CHUNK_OBJECT = {"chat": "chat.completion.chunk", "completions": "text_completion"}
_RESPONSE_OBJECT = {"chat": "chat.completion", "completions": "text_completion"}
_ERROR_FIELDS = {"message", "type", "param", "code"}


@dataclass
class Exchange:
    """One request as its client saw it."""

    endpoint: str  # "chat" or "completions"
    stream: bool
    max_tokens: int
    status: int | None = None  # None: no response head arrived
    body: bytes = b""  # the whole body of a non-streaming or refused request
    events: list[bytes] = field(default_factory=list)  # a stream's `data:` payloads before [DONE]
    done: bool = False  # a stream's [DONE] arrived
    client_disconnected: bool = False  # the client closed the stream on purpose before [DONE]
    timed_out: bool = False  # the client's deadline passed
    transport_error: str | None = None
    latency_s: float = 0.0

    @property
    def label(self) -> str:
        return f"{self.endpoint}/{'stream' if self.stream else 'plain'}"


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    detail: str = ""  # for errors: the status or error type; for failures: what was wrong


def _is_error_body(payload: Any) -> bool:
    error = payload.get("error") if isinstance(payload, dict) else None
    return isinstance(error, dict) and set(error) == _ERROR_FIELDS and bool(error["message"])


def _counted_ok(usage: Any, choices: list[dict], max_tokens: int) -> str:
    """Empty when the token count and the finish reasons are right; else what is wrong."""
    if not isinstance(usage, dict):
        return "no usage"
    if usage.get("completion_tokens") != max_tokens:
        return f"{usage.get('completion_tokens')} tokens, not {max_tokens}"
    reasons = {choice.get("finish_reason") for choice in choices if choice.get("finish_reason") is not None}
    if reasons != {"length"}:
        return f"finish reasons {sorted(map(str, reasons))}"
    return ""


def classify(exchange: Exchange) -> Verdict:
    if exchange.client_disconnected:
        return Verdict(Outcome.CLIENT_DISCONNECT)
    if exchange.timed_out:
        return Verdict(Outcome.HUNG, f"no end after {exchange.latency_s:.0f} s")
    if exchange.status is None:
        return Verdict(Outcome.CONNECTION_LOST, exchange.transport_error or "no response")
    if exchange.status >= 400:
        try:
            payload = json.loads(exchange.body)
        except ValueError:
            return Verdict(Outcome.MALFORMED, f"{exchange.status} without a JSON body")
        if not _is_error_body(payload):
            return Verdict(Outcome.MALFORMED, f"{exchange.status} without OpenAI's error body")
        return Verdict(Outcome.ERROR_STATUS, str(exchange.status))
    if exchange.status != 200:
        return Verdict(Outcome.MALFORMED, f"status {exchange.status}")
    return _classify_stream(exchange) if exchange.stream else _classify_plain(exchange)


def _classify_plain(exchange: Exchange) -> Verdict:
    if exchange.transport_error:
        return Verdict(Outcome.CONNECTION_LOST, exchange.transport_error)
    try:
        payload = json.loads(exchange.body)
    except ValueError:
        return Verdict(Outcome.MALFORMED, "200 without a JSON body")
    if not isinstance(payload, dict) or payload.get("object") != _RESPONSE_OBJECT[exchange.endpoint]:
        return Verdict(Outcome.MALFORMED, "200 without a response object")
    wrong = _counted_ok(payload.get("usage"), payload.get("choices") or [], exchange.max_tokens)
    return Verdict(Outcome.WRONG_COUNT, wrong) if wrong else Verdict(Outcome.COMPLETE)


def _classify_stream(exchange: Exchange) -> Verdict:
    chunks: list[dict] = []
    for position, raw in enumerate(exchange.events):
        try:
            payload = json.loads(raw)
        except ValueError:
            return Verdict(Outcome.MALFORMED, f"event {position} is not JSON")
        if not isinstance(payload, dict):
            return Verdict(Outcome.MALFORMED, f"event {position} is not an object")
        if "error" in payload:
            if not _is_error_body(payload):
                return Verdict(Outcome.MALFORMED, "an error event without OpenAI's error body")
            if position != len(exchange.events) - 1:
                return Verdict(Outcome.MALFORMED, "events after an error event")
            if not exchange.done:
                return Verdict(Outcome.TRUNCATED, "an error event without [DONE]")
            return Verdict(Outcome.ERROR_EVENT, str(payload["error"]["type"]))
        if payload.get("object") != _CHUNK_OBJECT[exchange.endpoint]:
            return Verdict(Outcome.MALFORMED, f"event {position} is a {payload.get('object')!r}")
        chunks.append(payload)
    if not exchange.done:
        cause = f" ({exchange.transport_error})" if exchange.transport_error else ""
        return Verdict(Outcome.TRUNCATED, f"no [DONE] and no error event after {len(chunks)} chunks{cause}")
    usage = next((chunk["usage"] for chunk in reversed(chunks) if chunk.get("usage")), None)
    choices = [choice for chunk in chunks for choice in chunk.get("choices") or []]
    wrong = _counted_ok(usage, choices, exchange.max_tokens)
    return Verdict(Outcome.WRONG_COUNT, wrong) if wrong else Verdict(Outcome.COMPLETE)
