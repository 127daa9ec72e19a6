"""Admission decisions and the numbers clients see, computed from counts alone (pure).

- `decide`: admit, queue or refuse a generation, from the gateway's global counts.
- `ratelimit_headers`: OpenAI's `x-ratelimit-*` headers from a key's window statistics.
- `waiting_by_model` / `shed`: the engine's own queue, as federated from Triton, against a threshold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from gateway.observability.federation import Family

WAITING_METRIC = "vllm:num_requests_waiting"


class Decision(Enum):
    ADMIT = "admit"
    QUEUE = "queue"
    REFUSE = "refuse"


def decide(in_flight: int, queued: int, max_in_flight: int | None, max_queued: int) -> Decision:
    """Admit while a slot is free and nobody waits for one (first come, first served); otherwise queue while
    the queue has room; otherwise refuse. No cap admits everything."""
    if max_in_flight is None or (in_flight < max_in_flight and queued == 0):
        return Decision.ADMIT
    if queued < max_queued:
        return Decision.QUEUE
    return Decision.REFUSE


@dataclass(frozen=True)
class Window:
    """One limit's state: its size, what is left of it, and when (epoch seconds) it starts afresh."""

    limit: int
    remaining: int
    reset_at: float


def retry_after_s(reset_at: float, now: float) -> int:
    """Whole seconds until `reset_at`, at least 1 (Retry-After takes integers)."""
    return max(1, math.ceil(reset_at - now))


def duration_text(seconds: float) -> str:
    """A reset delay as OpenAI writes it: `250ms`, `12s`, `1m30s`."""
    seconds = max(0.0, seconds)
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    whole = math.ceil(seconds)
    minutes, rest = divmod(whole, 60)
    return f"{minutes}m{rest}s" if minutes else f"{rest}s"


def ratelimit_headers(requests: Window | None, tokens: Window | None, now: float) -> dict[str, str]:
    """`x-ratelimit-{limit,remaining,reset}-{requests,tokens}` for the limits a key has."""
    headers = {}
    for kind, window in (("requests", requests), ("tokens", tokens)):
        if window is None:
            continue
        headers[f"x-ratelimit-limit-{kind}"] = str(window.limit)
        headers[f"x-ratelimit-remaining-{kind}"] = str(max(0, window.remaining))
        headers[f"x-ratelimit-reset-{kind}"] = duration_text(window.reset_at - now)
    return headers


def waiting_by_model(families: list[Family]) -> dict[str, float]:
    """Requests waiting in each model's engines, summed over Triton servers and model versions."""
    waiting: dict[str, float] = {}
    for family in families:
        if family.name != WAITING_METRIC:
            continue
        for sample in family.samples:
            labels, _, value = sample.rpartition(" ")
            if 'model="' not in labels:
                continue
            model = labels.split('model="', 1)[1].split('"', 1)[0]
            waiting[model] = waiting.get(model, 0.0) + float(value)
    return waiting


def shed(waiting: dict[str, float], model: str, threshold: int | None) -> bool:
    """Whether a new request for `model` is refused because its engines' queue is over `threshold`."""
    return threshold is not None and waiting.get(model, 0.0) > threshold
