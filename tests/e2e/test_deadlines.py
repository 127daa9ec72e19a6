"""Deadlines, caps, gRPC status codes and the circuit breaker, on the fast stack, with a gateway that reaches
Triton through a proxy the tests can stall or cut. The engine's own stalls are made by stopping its process
(SIGSTOP, then SIGCONT once the backend has aborted the cancelled request): the fast model would otherwise
finish a long request before its cancel arrived."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
import pytest

from localstack.processes import Service, wait_until
from localstack.stack import LocalStack
from tests.metrics_text import sample_value
from tests.engine_counts import EngineCounts, aborts, assert_cancelled, engine_paused, settled
from tests.tcp_proxy import FaultProxy

STALL_S = 1.5
FIRST_TOKEN_S = 5.0
LONG = 2000  # tokens (the fast model's context is 2048): seconds of generation, long past the deadlines


@dataclass
class Gateway:
    url: str
    proxy: FaultProxy
    service: Service
    stack: LocalStack

    @property
    def model(self) -> str:
        return self.stack.config.model_name

    def metric(self, name: str, **labels: str) -> float:
        return sample_value(httpx.get(f"{self.url}/metrics", timeout=10).text, name, **labels) or 0.0

    def engine(self, name: str) -> float:
        text = httpx.get(self.stack.triton_metrics_url, timeout=10).text
        return sample_value(text, name, model=self.model) or 0.0


@contextmanager
def _gateway(fast_stack: LocalStack, name: str, stall_s: float) -> Iterator[Gateway]:
    proxy = FaultProxy("127.0.0.1", fast_stack.config.grpc_port).start()
    env = {
        "GATEWAY_TRITON_GRPC_URL": f"127.0.0.1:{proxy.port}",
        "GATEWAY_STALL_TIMEOUT_S": str(stall_s),
        "GATEWAY_FIRST_TOKEN_TIMEOUT_S": str(FIRST_TOKEN_S),
        "GATEWAY_MAX_N": "2",
        "GATEWAY_MAX_TOKENS": "4000",
        "GATEWAY_MAX_PROMPTS": "2",
        "GATEWAY_BREAKER_FAILURES": "3",
        "GATEWAY_BREAKER_COOLDOWN_S": "6",
        "GATEWAY_READY_CACHE_S": "0",
    }
    try:
        with fast_stack.extra_gateway(name, env) as (service, url):
            # A first request warms the engine up, unstreamed so that no stream deadline applies to it.
            warm_up = {"model": fast_stack.config.model_name, "prompt": "Hi", "max_tokens": 4}
            httpx.post(f"{url}/v1/completions", json=warm_up, timeout=120).raise_for_status()
            yield Gateway(url, proxy, service, fast_stack)
    finally:
        proxy.stop()


@pytest.fixture(scope="module")
def gateway(fast_stack: LocalStack) -> Iterator[Gateway]:
    with _gateway(fast_stack, "gateway-deadlines", STALL_S) as gw:
        yield gw


@pytest.fixture(scope="module")
def patient_gateway(fast_stack: LocalStack) -> Iterator[Gateway]:
    """No stall deadline to race. With the engine stopped after the first token, `gateway`'s 1.5 s one fired
    before the client's leaving reached the gateway in a CI run beside a one-core hog: its log has the request
    ending in a timeout 2.8 s after its first token, not a disconnect, and no "closed" cancel was counted."""
    with _gateway(fast_stack, "gateway-disconnects", 300.0) as gw:
        yield gw


def _long_completion(model: str, stream: bool) -> dict:
    return {"model": model, "prompt": "Go on:", "max_tokens": LONG, "ignore_eos": True, "stream": stream}


def _settled(gw: Gateway) -> EngineCounts:
    """The engine's counts before a request, once those of the requests before it have landed."""
    return settled(gw.stack.triton_metrics_url, gw.model)


def _assert_cancelled_in_the_engine(gw: Gateway, before: EngineCounts) -> None:
    """The long request left vLLM without finishing: aborted, since its Triton request was cancelled."""
    assert_cancelled(gw.stack.triton_metrics_url, gw.model, before, LONG)


def _read_in_thread(gw: Gateway, events: list[str], first: threading.Event, leave_after_first: bool) -> threading.Thread:
    """A long streamed completion read on a thread: its events into `events`, `first` set at the first one; the
    client leaves then if `leave_after_first`."""

    def read() -> None:
        with httpx.stream("POST", f"{gw.url}/v1/completions", json=_long_completion(gw.model, True), timeout=30) as r:
            for line in r.iter_lines():
                if line:
                    events.append(line)
                    first.set()
                    if leave_after_first:
                        return

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def _last_payload(events: list[str]) -> dict:
    """The payload before a stream's [DONE] (parsed: the random text itself may hold the word "error")."""
    return json.loads(events[-2].removeprefix("data: ")) if len(events) >= 2 else {}


def _stream_with_engine_stalled(gw: Gateway) -> list[str]:
    """A long stream whose engine stops after its first tokens, until the stream has ended with the stall
    deadline's error and the backend has aborted the request that the gateway then cancelled."""
    events: list[str] = []
    first = threading.Event()
    aborted = aborts(gw.stack)
    with engine_paused(gw.stack) as engine:
        reader = _read_in_thread(gw, events, first, leave_after_first=False)
        engine.run_until(first.is_set)
        reader.join(timeout=15)  # what was on its way, then the stall, the deadline's error event and [DONE]
        assert not reader.is_alive(), "the stream did not end at the stall deadline"
        if "error" in _last_payload(events):  # else it had all its tokens: the test's assertions say so
            engine.hold_until_aborted(aborted)
    return events


def test_a_stall_after_the_first_byte_ends_the_stream_with_an_error_event_and_cancels(gateway: Gateway) -> None:
    gw = gateway
    before = _settled(gw)
    events = _stream_with_engine_stalled(gw)
    assert events[-1] == "data: [DONE]"
    error = _last_payload(events).get("error")
    assert error is not None, f"the stream ended before its engine stalled: {events[-2]}"
    assert error["code"] == "stall_timeout" and error["type"] == "timeout", error
    _assert_cancelled_in_the_engine(gw, before)
    assert gw.metric("gateway_deadlines_fired_total", model=gw.model, kind="stall") >= 1
    assert gw.metric("gateway_triton_cancellations_total", model=gw.model, reason="deadline") >= 1


def test_no_first_response_in_time_is_a_504_before_the_first_byte(gateway: Gateway) -> None:
    gw = gateway
    before = _settled(gw)
    gw.proxy.pause()  # the request waits in the proxy; it reaches Triton together with its cancel
    try:
        started = time.monotonic()
        response = httpx.post(f"{gw.url}/v1/completions", json=_long_completion(gw.model, True), timeout=30)
        took = time.monotonic() - started
    finally:
        gw.proxy.forward()
    assert response.status_code == 504, response.text
    assert response.json()["error"]["code"] == "first_token_timeout"
    assert took < 15  # well before the total deadline (600 s); not a speed check
    _assert_cancelled_in_the_engine(gw, before)
    assert gw.metric("gateway_deadlines_fired_total", model=gw.model, kind="first_token") >= 1


def test_a_network_stall_also_ends_the_stream_with_an_error_event(gateway: Gateway) -> None:
    """Triton's responses stop on the way (the connection stays up): the same deadline ends the stream."""
    gw = gateway
    # The pause strikes after 16 KiB of responses (a few dozen): armed before the request, so that the fast
    # engine cannot finish the stream before it, as it could before a pause made after the first event.
    gw.proxy.pause(after_bytes=16384)
    try:
        with httpx.stream("POST", f"{gw.url}/v1/completions", json=_long_completion(gw.model, True), timeout=30) as r:
            events = [line for line in r.iter_lines() if line]
    finally:
        gw.proxy.forward()  # the cancel reaches Triton once bytes flow again
    assert len(events) >= 3 and events[-1] == "data: [DONE]", events[-3:]  # chunks, the error, [DONE]
    assert json.loads(events[-2].removeprefix("data: "))["error"]["code"] == "stall_timeout"
    assert wait_until(lambda: gw.engine("vllm:num_requests_running") == 0, 10, 0.1)


def test_unstreamed_requests_keep_only_the_total_deadline(gateway: Gateway) -> None:
    """Unstreamed, Triton's only response is the last one: the stall and first-token deadlines do not apply."""
    gw = gateway
    body = {"model": gw.model, "prompt": "Go on:", "max_tokens": 64, "ignore_eos": True}
    gw.proxy.pause()
    try:
        with pytest.raises(httpx.ReadTimeout):  # held past both deadlines without an answer
            httpx.post(f"{gw.url}/v1/completions", json=body, timeout=FIRST_TOKEN_S + STALL_S + 1)
    finally:
        gw.proxy.forward()
    reply = httpx.post(f"{gw.url}/v1/completions", json=body, timeout=60)
    assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 64


@pytest.mark.parametrize(
    ("path", "extra", "param"),
    [
        ("/v1/completions", {"prompt": "x", "n": 3}, "n"),
        ("/v1/completions", {"prompt": "x", "max_tokens": 4001}, "max_tokens"),
        ("/v1/completions", {"prompt": ["a", "b", "c"]}, "prompt"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "n": 3}, "n"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 4001},
         "max_completion_tokens"),
    ],
)  # fmt: skip
def test_requests_over_the_caps_get_a_400_naming_the_param(gateway: Gateway, path: str, extra: dict, param: str) -> None:
    response = httpx.post(f"{gateway.url}{path}", json={"model": gateway.model, **extra}, timeout=30)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error" and param in error["message"]


def test_a_backend_error_arrives_in_the_stream_and_gets_its_status(gateway: Gateway) -> None:
    """Without `triton_grpc_error` (the default) the backend's invalid-argument error comes as a message in the
    stream, counted as UNKNOWN; the gateway still answers 400, without the backend's prefix."""
    gw = gateway
    unknown_before = gw.metric("gateway_triton_streams_total", model=gw.model, code="UNKNOWN")
    body = {"model": gw.model, "prompt": "x " * 5000, "max_tokens": 5}  # longer than the model's context
    response = httpx.post(f"{gw.url}/v1/completions", json=body, timeout=60)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and not error["message"].startswith("invalid request")
    assert gw.metric("gateway_triton_streams_total", model=gw.model, code="UNKNOWN") == unknown_before + 1


def test_repeated_unavailable_opens_the_breaker_then_a_probe_closes_it(gateway: Gateway) -> None:
    gw = gateway
    body = {"model": gw.model, "prompt": "x", "max_tokens": 2}
    gw.proxy.refuse()  # Triton is gone
    try:
        statuses = [httpx.post(f"{gw.url}/v1/completions", json=body, timeout=30) for _ in range(4)]
        assert [r.status_code for r in statuses] == [503] * 4
        assert all(r.json()["error"]["code"] != "circuit_open" for r in statuses[:3]), "opened too early"
        failing_fast = statuses[3]
        assert failing_fast.json()["error"]["code"] == "circuit_open"
        assert 1 <= int(failing_fast.headers["retry-after"]) <= 6
        ready = httpx.get(f"{gw.url}/health/ready", timeout=10)
        # Readiness refreshes the model map: with Triton refusing, it names Triton unreachable, ahead of the breaker
        # (test_faults checks the breaker's own report, with Triton reachable and its streams reset).
        reason = ready.json()["reason"]
        assert ready.status_code == 503 and ("circuit breaker open" in reason or "not reachable" in reason), reason
        assert gw.metric("gateway_triton_streams_total", model=gw.model, code="UNAVAILABLE") >= 3
        assert gw.metric("gateway_breaker_rejections_total", model=gw.model) >= 1
    finally:
        gw.proxy.forward()
    # After the cool-down one request probes Triton, now reachable again, and closes the breaker.
    def recovered() -> bool:
        return httpx.post(f"{gw.url}/v1/completions", json=body, timeout=30).status_code == 200

    assert wait_until(recovered, 30, 0.5), "the breaker did not close again"
    assert httpx.get(f"{gw.url}/health/ready", timeout=10).status_code == 200


def test_a_client_disconnect_is_counted_as_a_cancellation(patient_gateway: Gateway) -> None:
    gw = patient_gateway
    before = gw.metric("gateway_triton_cancellations_total", model=gw.model, reason="closed")
    engine_before = _settled(gw)
    aborted = aborts(gw.stack)
    with engine_paused(gw.stack) as engine:  # the request cannot end by itself before the client leaves
        first = threading.Event()
        reader = _read_in_thread(gw, [], first, leave_after_first=True)
        engine.run_until(first.is_set)
        reader.join(timeout=10)
        closed = lambda: gw.metric("gateway_triton_cancellations_total", model=gw.model, reason="closed") > before
        assert wait_until(closed, 5, 0.05), "the gateway did not cancel the request of the client that left"
        engine.hold_until_aborted(aborted)  # the cancel reached the backend, which queued the abort
    _assert_cancelled_in_the_engine(gw, engine_before)
    assert gw.metric("gateway_triton_cancellations_total", model=gw.model, reason="closed") == before + 1
    assert gw.metric("gateway_triton_streams_total", model=gw.model, code="CANCELLED") >= 1
