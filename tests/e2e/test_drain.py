"""The graceful drain on SIGTERM, end to end: a gateway process of its own (one worker or two) in front of the
fast model's Triton, signalled as Kubernetes does (the main process) or as Ctrl-C does (the process group).

The fast model writes 2,000 tokens in anything from 0.3 s to 3 s here, so no single stream is sure to be
running when the signal comes. The tests do not rely on timing: a request whose body the test holds back is in
flight at the signal for certain, and keeps the drain going for as long as the checks made during it take; its
whole stream then runs during the drain. For the drain deadline, the engine stays stopped (but for the short
steps that give every stream its first event) until every worker's drain is over: every stream is then still
running at the deadline, however slow the machine.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.client import HTTPConnection
from typing import Any

import httpx
import pytest

from localstack.net import free_port
from localstack.processes import Service, wait_until
from localstack.stack import LocalStack
from tests.engine_counts import PausedEngine, aborts, assert_cancelled, engine_paused, settled

TOKENS = 2000  # near the fast model's context (2048)
STREAMS = 8  # started together before the signal
DRAINING_LINE = "SIGTERM: draining"  # what each worker logs when its drain starts
CUT_LINE = re.compile(r"drain deadline: cut (\d+) generation")  # when its deadline cuts what is left
DRAINED_LINE = "drained in"  # when its drain is over
STARTED_LINE = "Application startup complete."  # uvicorn's, once per worker


def _body(model: str, stream: bool = True) -> dict[str, Any]:
    body = {"model": model, "prompt": "Tell me everything.", "max_tokens": TOKENS, "ignore_eos": True}
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    return body


def _events(raw: str) -> tuple[list[dict[str, Any]], bool]:
    """A stream's payloads, and whether it ended with [DONE] (after every payload)."""
    frames = [frame for frame in raw.split("\n\n") if frame]
    done = bool(frames) and frames[-1] == "data: [DONE]"
    payloads = [json.loads(frame[len("data: ") :]) for frame in frames if frame != "data: [DONE]"]
    return payloads, done and frames.count("data: [DONE]") == 1


def _completion_tokens(payloads: list[dict[str, Any]]) -> int | None:
    usages = [p["usage"] for p in payloads if p.get("usage")]
    return usages[-1]["completion_tokens"] if usages else None


@contextmanager
def _gateway(stack: LocalStack, workers: int, drain_timeout_s: float) -> Iterator[tuple[Service, str]]:
    env = {"GATEWAY_WORKERS": str(workers), "GATEWAY_DRAIN_TIMEOUT_S": str(drain_timeout_s)}
    with stack.extra_gateway(f"gateway-drain-{workers}w-{free_port()}", env) as (service, url):
        # Ready means one worker answers; a worker signalled before its start-up ends exits without draining.
        assert wait_until(lambda: _log_count(service, STARTED_LINE) == workers, 60, 0.1), service.log_tail()
        yield service, url


class _Stream(threading.Thread):
    """A streamed completion read to its end on a thread of its own; `first` is set at its first event."""

    def __init__(self, url: str, body: dict[str, Any]) -> None:
        super().__init__(daemon=True)
        self.url, self.body = url, body
        self.first = threading.Event()
        self.status: int | None = None
        self.raw = ""

    def run(self) -> None:
        with httpx.stream("POST", f"{self.url}/v1/completions", json=self.body, timeout=120) as response:
            self.status = response.status_code
            for text in response.iter_text():
                self.raw += text
                self.first.set()
        self.first.set()


class _HeldRequest:
    """A streamed completion sent without its body: in flight at the gateway until `finish` sends the body."""

    def __init__(self, host: str, port: int, body: dict[str, Any]) -> None:
        self.payload = json.dumps(body).encode()
        self.connection = HTTPConnection(host, port, timeout=120)
        self.connection.putrequest("POST", "/v1/completions")
        self.connection.putheader("Content-Type", "application/json")
        self.connection.putheader("Content-Length", str(len(self.payload)))
        self.connection.endheaders()

    def finish(self) -> tuple[int, str]:
        self.connection.send(self.payload)
        response = self.connection.getresponse()
        try:
            return response.status, response.read().decode()
        finally:
            self.connection.close()


def _log_count(service: Service, text: str) -> int:
    return sum(text in line for line in service.log_path.read_text(errors="replace").splitlines())


def _from_a_draining_worker(send: Callable[[], httpx.Response], attempts: int = 5) -> httpx.Response:
    """`send()`'s response from a worker still draining. With two workers, one whose streams have all ended stops
    while the other drains (the held request keeps only its own worker's drain going): a connection it took as it
    stopped is closed unanswered, and the next one goes to the worker still listening."""
    for _ in range(attempts - 1):
        try:
            return send()
        except httpx.RemoteProtocolError:
            continue
    return send()


def _start_streams(url: str, model: str, engine: PausedEngine | None = None) -> list[_Stream]:
    """STREAMS streams, each past its first event; with `engine` paused, stepped only until they are."""
    streams = [_Stream(url, _body(model)) for _ in range(STREAMS)]
    for stream in streams:
        stream.start()
    if engine is not None:
        engine.run_until(lambda: all(stream.first.is_set() for stream in streams))
    for stream in streams:
        assert stream.first.wait(60) and stream.status == 200, stream.raw
    return streams


@pytest.mark.parametrize("workers", [1, 2])
def test_streams_in_flight_finish_after_sigterm_and_new_requests_get_503(fast_stack: LocalStack, workers: int) -> None:
    model = fast_stack.config.model_name
    with _gateway(fast_stack, workers, drain_timeout_s=120) as (service, url):
        held = _HeldRequest(fast_stack.config.gateway_host, int(url.rsplit(":", 1)[1]), _body(model))
        streams = _start_streams(url, model)
        service.process.send_signal(signal.SIGTERM)  # as Kubernetes stops a pod: the main process alone
        # uvicorn's supervisor passes the signal on to its workers twice a second.
        assert wait_until(lambda: _log_count(service, DRAINING_LINE) == workers, 30, 0.1), service.log_tail()

        ready = _from_a_draining_worker(lambda: httpx.get(f"{url}/health/ready", timeout=10))
        assert ready.status_code == 503 and ready.json()["status"] == "draining"
        assert _from_a_draining_worker(lambda: httpx.get(f"{url}/health/live", timeout=10)).status_code == 200
        refused = _from_a_draining_worker(
            lambda: httpx.post(f"{url}/v1/completions", json=_body(model, stream=False), timeout=10)
        )
        assert refused.status_code == 503 and refused.headers["connection"] == "close"
        assert refused.json()["error"]["code"] == "server_shutting_down"
        assert service.running()

        results = [held.finish()]
        for stream in streams:
            stream.join(120)
            results.append((stream.status, stream.raw))
        for status, raw in results:
            payloads, done = _events(raw)
            assert status == 200 and done, raw[-500:]
            assert not [p for p in payloads if "error" in p]
            assert _completion_tokens(payloads) == TOKENS
        assert service.process.wait(timeout=60) == 0, service.log_tail()


@pytest.mark.parametrize("workers", [1, 2])
def test_streams_outliving_the_drain_timeout_end_with_an_error_and_are_cancelled(
    fast_stack: LocalStack, workers: int
) -> None:
    model = fast_stack.config.model_name
    before = settled(fast_stack.triton_metrics_url, model)
    aborted = aborts(fast_stack)
    with _gateway(fast_stack, workers, drain_timeout_s=0.5) as (service, url):
        with engine_paused(fast_stack) as engine:  # no stream can end by itself before the deadline
            streams = _start_streams(url, model, engine)
            os.killpg(service.pid, signal.SIGTERM)  # as Ctrl-C reaches a process group: every worker at once
            # Every worker's drain ends, its deadline cutting what it had; then the backend aborts what was cut.
            assert wait_until(lambda: _log_count(service, DRAINED_LINE) == workers, 15, 0.05), service.log_tail()
            log = service.log_path.read_text(errors="replace")
            assert sum(int(n) for n in CUT_LINE.findall(log)) == STREAMS, service.log_tail()
            engine.hold_until_aborted(aborted, STREAMS)
        for stream in streams:
            stream.join(120)
            payloads, done = _events(stream.raw)
            assert done, stream.raw[-500:]  # every stream ends properly
            # Cut: the error event, then [DONE]; fewer than TOKENS tokens and no usage chunk.
            assert payloads[-1].get("error", {}).get("code") == "server_shutting_down", payloads[-1]
            assert _completion_tokens(payloads) is None
            assert sum(1 for p in payloads for c in p.get("choices", []) if c.get("text")) < TOKENS
        assert service.process.wait(timeout=60) == 0, service.log_tail()

    # Triton's requests were cancelled with the streams: the engine dropped them unfinished.
    assert_cancelled(fast_stack.triton_metrics_url, model, before, STREAMS * TOKENS)
