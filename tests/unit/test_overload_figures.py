"""The overload benchmark's verdicts and figures (bench/overload/figures.py), without servers."""

from __future__ import annotations

import json

from bench.overload.figures import Attempt, figures, gateway_refusal_durations, judge, table
from bench.soak.outcomes import Exchange

_BUSY = json.dumps({"error": {"message": "busy", "type": "service_unavailable", "param": None, "code": "server_busy"}})


def _refused(status: int = 503, retry_after: str | None = "1", latency_s: float = 0.01, lone: bool = False) -> Attempt:
    exchange = Exchange("completions", False, 4, status=status, body=_BUSY.encode(), latency_s=latency_s)
    return Attempt(exchange, retry_after=retry_after, lone=lone)


def _complete(tokens: int = 4) -> Attempt:
    body = {
        "object": "text_completion",
        "choices": [{"index": 0, "text": "abcd", "finish_reason": "length"}],
        "usage": {"prompt_tokens": 2, "completion_tokens": tokens, "total_tokens": 2 + tokens},
    }
    return Attempt(Exchange("completions", False, 4, status=200, body=json.dumps(body).encode(), latency_s=0.5))


def test_a_refusal_needs_retry_after_and_a_refusing_status() -> None:
    assert judge(_refused()).kind == "refused" and judge(_refused()).code == "server_busy"
    assert judge(_refused(429)).kind == "refused"
    assert judge(_refused(retry_after=None)).kind == "503 without Retry-After"
    assert judge(_refused(retry_after="soon")).kind == "503 without Retry-After"
    assert judge(_refused(500)).kind == "error_status: 500"  # an error, but not a refusal


def test_complete_hung_and_wrong_counts() -> None:
    assert judge(_complete()).kind == "complete"
    assert judge(_complete(3)).kind.startswith("wrong_count")
    hung = Attempt(Exchange("completions", True, 4, timed_out=True, latency_s=60))
    assert judge(hung).kind.startswith("hung")


def test_figures_split_the_lone_clients_refusals_and_count_failures() -> None:
    attempts = [_refused(latency_s=0.02), _refused(latency_s=0.04, lone=True), _complete(), _refused(retry_after=None)]
    result = figures(attempts, [0.001, None, 0.003], [0.0005])
    assert result.outcomes == {"refused": 2, "complete": 1, "503 without Retry-After": 1}
    assert result.failures == {"503 without Retry-After": 1}
    assert result.refusal_client_ms == [20.0] and result.refusal_lone_ms == [40.0]
    assert result.liveness_ms == [1.0, 3.0] and result.liveness_failures == 1
    assert result.refusal_gateway_ms == [0.5]
    text = table(result, "setup")
    assert "| refusal, in the gateway | 1 |" in text and "1 liveness probes failed" in text


def test_gateway_refusal_durations_read_refused_generations_from_the_access_log() -> None:
    lines = [
        json.dumps({"path": "/v1/completions", "status": 503, "duration_s": 0.0004}),
        json.dumps({"path": "/v1/chat/completions", "status": 429, "duration_s": 0.001}),
        json.dumps({"path": "/v1/completions", "status": 200, "duration_s": 1.2}),
        json.dumps({"path": "/health/ready", "status": 503, "duration_s": 0.01}),
        "INFO:     Uvicorn running",
        "{not json",
    ]
    assert gateway_refusal_durations(lines) == [0.0004, 0.001]
