"""Admission's pure decisions: admit/queue/refuse, x-ratelimit headers, shedding."""

from __future__ import annotations

import pytest

from gateway.admission.policy import (
    Decision,
    Window,
    decide,
    duration_text,
    ratelimit_headers,
    retry_after_s,
    shed,
    waiting_by_model,
)
from gateway.observability.federation import parse_families


@pytest.mark.parametrize(
    "in_flight, queued, max_in_flight, max_queued, expected",
    [
        (0, 0, None, 0, Decision.ADMIT),  # no cap
        (10**6, 0, None, 0, Decision.ADMIT),
        (0, 0, 1, 0, Decision.ADMIT),
        (1, 0, 1, 0, Decision.REFUSE),  # full, no queue
        (1, 0, 1, 2, Decision.QUEUE),
        (1, 1, 1, 2, Decision.QUEUE),
        (1, 2, 1, 2, Decision.REFUSE),  # queue full
        (0, 1, 1, 2, Decision.QUEUE),  # a free slot goes to those already waiting first
    ],
)
def test_decide(in_flight: int, queued: int, max_in_flight: int | None, max_queued: int, expected: Decision) -> None:
    assert decide(in_flight, queued, max_in_flight, max_queued) is expected


def test_headers_for_both_limits() -> None:
    headers = ratelimit_headers(Window(60, 59, 1030.0), Window(1000, -20, 1000.25), now=1000.0)
    assert headers == {
        "x-ratelimit-limit-requests": "60",
        "x-ratelimit-remaining-requests": "59",
        "x-ratelimit-reset-requests": "30s",
        "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-remaining-tokens": "0",  # overshoot shows as nothing left
        "x-ratelimit-reset-tokens": "250ms",
    }


def test_headers_only_for_the_limits_a_key_has() -> None:
    assert set(ratelimit_headers(None, Window(5, 5, 0.0), now=0.0)) == {
        "x-ratelimit-limit-tokens",
        "x-ratelimit-remaining-tokens",
        "x-ratelimit-reset-tokens",
    }
    assert ratelimit_headers(None, None, now=0.0) == {}


@pytest.mark.parametrize("seconds, text", [(-1, "0ms"), (0.0004, "0ms"), (0.5, "500ms"), (1, "1s"), (59.2, "1m0s"),
                                           (61, "1m1s"), (90, "1m30s")])
def test_duration_text(seconds: float, text: str) -> None:
    assert duration_text(seconds) == text


def test_retry_after_is_a_whole_second_at_least() -> None:
    assert retry_after_s(100.2, 100.0) == 1
    assert retry_after_s(99.0, 100.0) == 1
    assert retry_after_s(112.1, 100.0) == 13


TRITON = """# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model="m1",version="1"} 3
vllm:num_requests_waiting{model="m2",version="1"} 0
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model="m1",version="1"} 9
"""


def test_waiting_is_summed_per_model_over_upstreams() -> None:
    families = parse_families(TRITON, "http://a/metrics") + parse_families(TRITON, "http://b/metrics")
    assert waiting_by_model(families) == {"m1": 6.0, "m2": 0.0}


def test_shed_only_above_the_threshold_and_only_when_set() -> None:
    waiting = {"m1": 6.0}
    assert shed(waiting, "m1", 5)
    assert not shed(waiting, "m1", 6)
    assert not shed(waiting, "m2", 0)
    assert not shed(waiting, "m1", None)
