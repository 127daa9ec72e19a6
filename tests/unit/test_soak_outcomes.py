"""The soak's verdicts on what a client saw, and its after-checks: each way a request can end, and each way a
check can fail."""

from __future__ import annotations

import json

import orjson
import pytest

from bench.soak import report
from bench.soak.driver import leaves_here
from bench.soak.outcomes import FAILURES, Exchange, Outcome, classify
from gateway.errors import OpenAIError

ERROR = {"error": {"message": "engine gone", "type": "server_error", "param": None, "code": None}}


def _chunk(endpoint: str, finish: str | None = None, usage: int | None = None) -> bytes:
    obj = "chat.completion.chunk" if endpoint == "chat" else "text_completion"
    choice = {"index": 0, "finish_reason": finish}
    payload: dict = {"object": obj, "choices": [] if usage is not None else [choice]}
    if usage is not None:
        payload["usage"] = {"prompt_tokens": 3, "completion_tokens": usage, "total_tokens": 3 + usage}
    return json.dumps(payload).encode()


def _stream(endpoint: str = "chat", tokens: int = 32, done: bool = True, **fields) -> Exchange:
    events = [_chunk(endpoint), _chunk(endpoint, finish="length"), _chunk(endpoint, usage=tokens)]
    return Exchange(endpoint, True, 32, status=200, events=events, done=done, **fields)


def _plain(endpoint: str = "completions", tokens: int = 32, finish: str = "length", status: int = 200) -> Exchange:
    obj = "chat.completion" if endpoint == "chat" else "text_completion"
    body = {"object": obj, "choices": [{"index": 0, "finish_reason": finish}], "usage": {"completion_tokens": tokens}}
    return Exchange(endpoint, False, 32, status=status, body=json.dumps(body).encode())


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_a_full_stream_and_a_full_response_are_complete(endpoint: str) -> None:
    assert classify(_stream(endpoint)).outcome is Outcome.COMPLETE
    assert classify(_plain(endpoint)).outcome is Outcome.COMPLETE


def test_a_wrong_token_count_or_finish_reason_is_a_failure() -> None:
    short = classify(_stream(tokens=31))
    assert short.outcome is Outcome.WRONG_COUNT and "31 tokens" in short.detail
    assert classify(_plain(tokens=5)).outcome is Outcome.WRONG_COUNT
    assert classify(_plain(finish="stop")).outcome is Outcome.WRONG_COUNT
    no_usage = _stream()
    no_usage.events.pop()
    assert classify(no_usage).outcome is Outcome.WRONG_COUNT


def test_a_stream_without_done_or_error_event_is_truncated() -> None:
    verdict = classify(_stream(done=False, transport_error="ClientPayloadError"))
    assert verdict.outcome is Outcome.TRUNCATED and "ClientPayloadError" in verdict.detail


def test_an_error_event_then_done_is_an_explicit_error() -> None:
    exchange = _stream()
    exchange.events = [exchange.events[0], json.dumps(ERROR).encode()]
    verdict = classify(exchange)
    assert verdict.outcome is Outcome.ERROR_EVENT and verdict.detail == "server_error"
    exchange.done = False
    assert classify(exchange).outcome is Outcome.TRUNCATED
    exchange.done = True
    exchange.events.append(_chunk("chat"))
    assert classify(exchange).outcome is Outcome.MALFORMED


def test_an_error_status_needs_openais_error_body() -> None:
    refused = Exchange("chat", True, 32, status=503, body=json.dumps(ERROR).encode())
    assert classify(refused).outcome is Outcome.ERROR_STATUS
    assert classify(refused).detail == "503"
    assert classify(Exchange("chat", False, 32, status=500, body=b"Internal Server Error")).outcome is Outcome.MALFORMED
    assert classify(Exchange("chat", False, 32, status=502, body=b'{"detail": "x"}')).outcome is Outcome.MALFORMED


def test_hangs_lost_connections_and_garbage_are_failures_and_disconnects_are_not() -> None:
    assert classify(Exchange("chat", True, 32, timed_out=True, latency_s=70)).outcome is Outcome.HUNG
    assert classify(Exchange("chat", True, 32, transport_error="ServerDisconnectedError")).outcome is Outcome.CONNECTION_LOST
    garbage = _stream()
    garbage.events[1] = b"{not json"
    assert classify(garbage).outcome is Outcome.MALFORMED
    left = classify(_stream(done=False, client_disconnected=True))
    assert left.outcome is Outcome.CLIENT_DISCONNECT and left.outcome not in FAILURES


def test_after_checks_pass_and_fail_on_their_figures() -> None:
    assert report.recovered([21.8, 4.7]).passed and not report.recovered([21.8, None]).passed
    assert report.engine_idle(0, 0, 0.3).passed
    assert not report.engine_idle(1, 0, 5.1).passed
    assert report.rss_growth(100 * 2**20, 109 * 2**20).passed
    assert not report.rss_growth(100 * 2**20, 111 * 2**20).passed
    assert report.back_to_baseline("fds", 40, 40 + report.FD_SLACK, report.FD_SLACK).passed
    assert not report.back_to_baseline("fds", 40, 41 + report.FD_SLACK, report.FD_SLACK).passed
    assert not report.back_to_baseline("tasks", None, 3, 0).passed
    assert report.no_orphans([]).passed and not report.no_orphans(["123 tritonserver"]).passed


def test_the_summary_counts_outcomes_by_endpoint_and_shows_the_checks() -> None:
    exchanges = [_stream(), _plain(), _stream(done=False), Exchange("chat", True, 32, status=503, body=json.dumps(ERROR).encode())]
    verdicts = [classify(e) for e in exchanges]
    checks = [report.no_failures(verdicts), report.engine_idle(0, 0, 0.2)]
    text = report.summary(exchanges, verdicts, ["10.0 s  killed the engine"], checks, 60)
    assert "4 requests in 60 s" in text and "killed the engine" in text
    [truncated] = [line for line in text.splitlines() if line.startswith("truncated")]
    assert truncated.split()[1:4] == ["1", "0", "1"] and "FAILURE" in truncated
    assert "[FAIL] every request complete or an explicit error: 1 of 4 failed" in text
    assert "[ok] engine queues empty" in text


def test_a_leaving_client_leaves_after_its_count_but_never_on_an_error_event() -> None:
    error_event = orjson.dumps(OpenAIError(503, "engine gone").body())  # as the gateway writes it
    assert not leaves_here(_chunk("chat"), 1, None)
    assert not leaves_here(_chunk("chat"), 1, 2)
    assert leaves_here(_chunk("chat"), 2, 2)
    assert not leaves_here(error_event, 3, 2)
