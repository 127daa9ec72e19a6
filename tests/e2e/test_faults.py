"""Faults between the gateway and Triton (issue 23), on the fast stack: a gateway reaches Triton through a
fault-injecting TCP proxy (tests/tcp_proxy.py) that adds latency, swallows bytes (a black hole) or resets the
connection. Each fault must end in the right status or stream event, cancel what it left running in the engine,
and leave no slot, queue entry or in-flight request behind.

Statuses and timings are asserted loosely: no speed targets here."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from localstack.net import http_ok
from localstack.processes import Service, wait_until
from localstack.stack import LocalStack
from tests.engine_counts import EngineCounts, assert_cancelled, settled
from tests.tcp_proxy import FaultProxy

LATENCY_S = 1.5  # each way
FIRST_TOKEN_S = 6.0  # above the latency's round trip, so that a slow first answer is not a timeout
STALL_S = 2.0
BREAKER_FAILURES = 3
BREAKER_COOLDOWN_S = 4.0
FAULT_AFTER_BYTES = 16384  # a few dozen of Triton's responses: well into a stream, far from its end
LONG = 2000  # tokens (the fast model's context is 2048): seconds of generation, long past every fault
# Gauges that count what the gateway holds: after every fault, all back to 0.
HELD = ("gateway_admission_in_flight", "gateway_admission_queued", "gateway_requests_in_flight")


@dataclass
class Gateway:
    url: str
    proxy: FaultProxy
    service: Service
    stack: LocalStack

    @property
    def model(self) -> str:
        return self.stack.config.model_name

    def held(self) -> dict[str, float]:
        """The sum of each HELD gauge over its labels."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        sums = dict.fromkeys(HELD, 0.0)
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in sums:
                    sums[sample.name] += sample.value
        return sums

    def engine(self) -> EngineCounts:
        return EngineCounts.read(self.stack.triton_metrics_url, self.model)

    def settled(self) -> EngineCounts:
        return settled(self.stack.triton_metrics_url, self.model)

    def assert_cancelled(self, before: EngineCounts) -> None:
        assert_cancelled(self.stack.triton_metrics_url, self.model, before, LONG)


@pytest.fixture(scope="module")
def gateway(fast_stack: LocalStack) -> Iterator[Gateway]:
    proxy = FaultProxy("127.0.0.1", fast_stack.config.grpc_port).start()
    env = {
        "GATEWAY_TRITON_GRPC_URL": f"127.0.0.1:{proxy.port}",
        "GATEWAY_FIRST_TOKEN_TIMEOUT_S": str(FIRST_TOKEN_S),
        "GATEWAY_STALL_TIMEOUT_S": str(STALL_S),
        "GATEWAY_BREAKER_FAILURES": str(BREAKER_FAILURES),
        "GATEWAY_BREAKER_COOLDOWN_S": str(BREAKER_COOLDOWN_S),
        "GATEWAY_READY_CACHE_S": "0",
        # No model-map refresh during a test: a reset landing on one marks the replica unreachable, and the next
        # refresh that answers clears its breakers (gateway/routing/fleet.py), which the breaker test would race.
        "GATEWAY_MODEL_REFRESH_S": "60",
        "GATEWAY_MAX_IN_FLIGHT": "4",  # so that the admission gauges count, and a leaked slot would show
        "GATEWAY_MAX_QUEUED": "4",
    }
    try:
        with fast_stack.extra_gateway("gateway-faults", env) as (service, url):
            warm_up = {"model": fast_stack.config.model_name, "prompt": "Hi", "max_tokens": 4}
            httpx.post(f"{url}/v1/completions", json=warm_up, timeout=120).raise_for_status()
            yield Gateway(url, proxy, service, fast_stack)
    finally:
        proxy.stop()


@pytest.fixture(autouse=True)
def nothing_left_held(gateway: Gateway) -> Iterator[None]:
    """After every fault: the connection is back, nothing holds a slot or a queue entry, the engine is idle."""
    yield
    gateway.proxy.forward()
    assert wait_until(lambda: _completes(gateway), 30, 0.5), "the gateway did not serve again after the fault"
    assert wait_until(lambda: not any(gateway.held().values()), 10, 0.1), gateway.held()
    assert wait_until(lambda: gateway.engine().running == 0, 10, 0.1), "the engine still runs a request"


def _completes(gw: Gateway) -> bool:
    body = {"model": gw.model, "prompt": "Hi", "max_tokens": 2}
    return httpx.post(f"{gw.url}/v1/completions", json=body, timeout=30).status_code == 200


def _body(model: str, max_tokens: int, stream: bool) -> dict:
    return {
        "model": model,
        "prompt": "Once upon a time",
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0,
        "stream": stream,
        **({"stream_options": {"include_usage": True}} if stream else {}),
    }


def _events(lines: Iterator[str]) -> list[str]:
    return [line for line in lines if line]


def _streamed_text(gw: Gateway, max_tokens: int) -> tuple[str, int, list[str]]:
    """A whole stream: its text, its completion tokens and its events."""
    with httpx.stream("POST", f"{gw.url}/v1/completions", json=_body(gw.model, max_tokens, True), timeout=60) as r:
        assert r.status_code == 200
        events = _events(r.iter_lines())
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(event.removeprefix("data: ")) for event in events[:-1]]
    assert not any("error" in chunk for chunk in chunks), events
    text = "".join(choice["text"] for chunk in chunks for choice in chunk.get("choices", []))
    usage = next(chunk["usage"] for chunk in chunks if chunk.get("usage"))
    return text, usage["completion_tokens"], events


def _error_of(events: list[str]) -> dict:
    """The error event just before [DONE]."""
    assert events[-1] == "data: [DONE]", events[-3:]
    last = json.loads(events[-2].removeprefix("data: "))
    assert "error" in last, events[-3:]
    return last["error"]


def _stream_reset_after(gw: Gateway, after_bytes: int) -> tuple[int, list[str]]:
    """A long stream whose connection to Triton is reset once `after_bytes` have gone down it (a reset armed
    before the request, on the open connection and the ones to come: nothing can outrun it). Its status and
    events, or its error body."""
    armed_on = gw.proxy.describe()
    gw.proxy.reset(after_bytes)
    with httpx.stream("POST", f"{gw.url}/v1/completions", json=_body(gw.model, LONG, True), timeout=60) as r:
        if r.status_code != 200:
            return r.status_code, [r.read().decode(), f"armed on: {armed_on}; now: {gw.proxy.describe()}"]
        events = [line for line in r.iter_lines() if line]
    return 200, events


def test_with_latency_requests_still_complete_with_the_same_results(gateway: Gateway) -> None:
    gw = gateway
    unstreamed = httpx.post(f"{gw.url}/v1/completions", json=_body(gw.model, 16, False), timeout=60).json()
    text, tokens, _ = _streamed_text(gw, 16)
    gw.proxy.delay(up_s=LATENCY_S, down_s=LATENCY_S)
    started = time.monotonic()
    slow = httpx.post(f"{gw.url}/v1/completions", json=_body(gw.model, 16, False), timeout=60)
    slow_text, slow_tokens, _ = _streamed_text(gw, 16)
    took = time.monotonic() - started
    assert slow.status_code == 200, slow.text
    assert slow.json()["choices"][0]["text"] == unstreamed["choices"][0]["text"]
    assert slow.json()["usage"]["completion_tokens"] == 16
    assert (slow_text, slow_tokens) == (text, tokens) and tokens == 16
    assert took >= 2 * 2 * LATENCY_S * 0.9, "the latency was not applied"  # two round trips at least


def test_a_black_hole_before_the_first_byte_is_a_504(gateway: Gateway) -> None:
    gw = gateway
    gw.proxy.black_hole()  # the request goes nowhere, and nothing comes back
    started = time.monotonic()
    response = httpx.post(f"{gw.url}/v1/completions", json=_body(gw.model, LONG, True), timeout=60)
    took = time.monotonic() - started
    assert response.status_code == 504, response.text
    assert response.json()["error"]["code"] == "first_token_timeout"
    assert FIRST_TOKEN_S * 0.9 <= took < 30  # the first-token deadline, well before the total one (600 s)


def test_a_black_hole_after_the_first_byte_ends_the_stream_with_an_error_event(gateway: Gateway) -> None:
    """The gateway's cancel falls into the hole too: Triton keeps generating until the connection is closed
    (here when the hole ends; in life when a keepalive gives up), so only the engine's end is checked (after
    every test), not that it was cancelled."""
    gw = gateway
    gw.proxy.black_hole(FAULT_AFTER_BYTES)  # armed before the request: the stream cannot outrun it
    with httpx.stream("POST", f"{gw.url}/v1/completions", json=_body(gw.model, LONG, True), timeout=60) as r:
        assert r.status_code == 200
        events = [line for line in r.iter_lines() if line]
    assert len(events) >= 3, events  # chunks, the error, [DONE]
    error = _error_of(events)
    assert error["code"] == "stall_timeout" and error["type"] == "timeout", error


@pytest.mark.parametrize("after_bytes", [8192, 32768], ids=["after-8-KiB", "after-32-KiB"])
def test_a_reset_mid_stream_ends_the_stream_with_an_error_event(gateway: Gateway, after_bytes: int) -> None:
    """The RST hits mid-stream, half a second after the bytes before it (tests/tcp_proxy.py: without that pause
    it could overtake them, and the stream failed before its first byte, 3 times in a row once on CI): the stream
    ends with an error event then [DONE]. The gateway's gRPC usually reads the RST at once (a 503-style event,
    UNAVAILABLE); now and then it did not within the stall deadline (2 s), which then ended the stream. Whether the engine was cancelled is not checked here: the fast
    engine finishes 2000 tokens in about a second, ahead of what the gateway relays, so it may be done before
    the reset; that the engine ends up idle is (after every test), and test_deadlines checks cancellation."""
    gw = gateway
    for _ in range(3):  # now and then the next request went out on a connection just reset: a 503, retried
        assert wait_until(lambda: _completes(gw), 10, 0.2)  # a connection up and idle when the reset is armed
        unavailable_before = _streams(gw, "UNAVAILABLE")
        status, events = _stream_reset_after(gw, after_bytes)
        gw.proxy.forward()
        if status == 200:
            break
        assert status == 503 and json.loads(events[0])["error"]["type"] == "service_unavailable", events
    assert status == 200, events
    assert len(events) >= 3, events  # at least one chunk, the error, [DONE]
    error = _error_of(events)
    if error["type"] == "service_unavailable":
        assert "unavailable" in error["message"].lower(), error
        assert _streams(gw, "UNAVAILABLE") == unavailable_before + 1
    else:
        assert error["code"] == "stall_timeout", error


def test_a_reset_before_the_first_byte_is_a_503(gateway: Gateway) -> None:
    gw = gateway
    gw.proxy.pause()  # the request waits in the proxy, then its connection is reset
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(
            httpx.post, f"{gw.url}/v1/completions", json=_body(gw.model, LONG, True), timeout=60
        )
        assert wait_until(lambda: gw.proxy.held_up > 0, 30, 0.05), "the request did not reach the proxy"
        assert gw.proxy.reset() >= 1
        gw.proxy.forward()
        response = pending.result()
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error["type"] == "service_unavailable" and error["code"] != "circuit_open", error


def test_streams_reset_again_and_again_open_the_breaker_until_triton_is_back(gateway: Gateway) -> None:
    """Streams that answered and then lost their connection add up: the breaker opens, readiness says so,
    requests fail fast with Retry-After, and once the cool-down is over one that succeeds closes it."""
    gw = gateway
    unavailable_before = _streams(gw, "UNAVAILABLE")
    outcomes: list[str] = []  # how each reset stream ended, for the message of a failure
    for _ in range(40):  # until BREAKER_FAILURES of them ended UNAVAILABLE (see above)
        # Mid-stream, or before the first byte when the next request went out on the connection just reset. Often
        # the stall deadline instead, which gives the breaker no verdict: 2 of 5 locally, 7 of 9 once on CI.
        status, events = _stream_reset_after(gw, FAULT_AFTER_BYTES)
        if status == 200:
            error = _error_of(events)
            assert len(events) >= 3 and error["type"] in ("service_unavailable", "timeout"), events[-3:]
            outcomes.append(f"200 {error['code'] or error['type']} after {len(events)} events")
        else:
            error = json.loads(events[0])["error"]
            assert status == 503 and error["code"] != "circuit_open", (status, error)
            outcomes.append(f"{status} {error['type']}")
        if _streams(gw, "UNAVAILABLE") >= unavailable_before + BREAKER_FAILURES:
            break
    assert _streams(gw, "UNAVAILABLE") == unavailable_before + BREAKER_FAILURES, outcomes
    failing_fast = httpx.post(f"{gw.url}/v1/completions", json=_body(gw.model, 2, False), timeout=30)
    assert failing_fast.status_code == 503 and failing_fast.json()["error"]["code"] == "circuit_open"
    assert 1 <= int(failing_fast.headers["retry-after"]) <= BREAKER_COOLDOWN_S
    ready = httpx.get(f"{gw.url}/health/ready", timeout=10)
    assert ready.status_code == 503 and "circuit breaker open" in ready.json()["reason"], ready.text
    assert ready.json()["models"][gw.model] == "CIRCUIT_OPEN", ready.text
    assert http_ok(f"{gw.url}/health/live")
    gw.proxy.forward()  # Triton is back
    assert wait_until(lambda: _completes(gw), BREAKER_COOLDOWN_S + 20, 0.5), "the breaker did not close"
    assert httpx.get(f"{gw.url}/health/ready", timeout=10).status_code == 200


def _streams(gw: Gateway, code: str) -> float:
    text = httpx.get(f"{gw.url}/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "gateway_triton_streams_total" and sample.labels == {"model": gw.model, "code": code}:
                return sample.value
    return 0.0
