"""Overload (issue 23), on the fast stack: bursts at four times a gateway's capacity (8 in flight, 8 queued).
Every request ends complete or refused with 429/503 and Retry-After, none hangs, liveness answers throughout,
and nothing stays held afterwards. Correctness only: the latencies against the targets are `make overload`'s."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from bench.overload.bursts import BurstPlan
from bench.overload.run import GATEWAY_ENV, MAX_IN_FLIGHT, MAX_QUEUED, OverloadResult, overload
from localstack.stack import LocalStack
from tests.metrics_text import sample_value

BURSTS = 3
SIZE = 4 * (MAX_IN_FLIGHT + MAX_QUEUED)


@pytest.fixture(scope="module")
def result(fast_stack: LocalStack) -> Iterator[tuple[OverloadResult, str]]:
    with fast_stack.extra_gateway("gateway-overload", GATEWAY_ENV) as (service, url):
        plan = BurstPlan(url, fast_stack.config.model_name, bursts=BURSTS, size=SIZE, max_tokens=32)
        model = fast_stack.config.model_name
        yield overload(url, fast_stack.triton_metrics_url, model, service.log_path, plan), url


def test_every_request_ends_complete_or_refused_with_retry_after(result: tuple[OverloadResult, str]) -> None:
    run, _ = result
    print(run.summary())  # the figures, for whoever runs it with -s
    outcomes = run.figures.outcomes
    assert not run.figures.failures, run.summary()  # nothing hung, nothing else went wrong
    assert sum(outcomes.values()) >= BURSTS * SIZE  # the bursts' and the lone client's
    assert outcomes["complete"] >= BURSTS * MAX_IN_FLIGHT, run.summary()  # at least the slots' worth
    assert outcomes["refused"] >= BURSTS * (SIZE - MAX_IN_FLIGHT - MAX_QUEUED) // 2, run.summary()
    assert set(run.figures.refusal_codes) == {"server_busy"}, run.figures.refusal_codes


def test_the_refusals_are_counted_and_nothing_stays_held(result: tuple[OverloadResult, str]) -> None:
    run, url = result
    assert not run.left_held, run.left_held  # slots, queue, requests in flight, the engine's queues: all 0
    metrics = httpx.get(f"{url}/metrics", timeout=10).text
    refused = sum(
        sample_value(metrics, "gateway_rejections_total", reason=reason, key="none") or 0
        for reason in ("queue_full", "queue_timeout")
    )
    assert refused == run.figures.outcomes["refused"]


def test_liveness_answered_throughout(result: tuple[OverloadResult, str]) -> None:
    run, _ = result
    assert run.figures.liveness_ms and not run.figures.liveness_failures
    assert run.figures.refusal_gateway_ms, "the gateway's access log had no refusal"
