"""Raw HTTP: SSE framing, error shapes and status codes, health probes."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.client import HTTPConnection, RemoteDisconnected
from pathlib import Path

import httpx
import pytest

from localstack.processes import Service, wait_until
from localstack.stack import LocalStack
from localstack.net import free_port


@pytest.fixture(scope="module")
def http(stack: LocalStack) -> httpx.Client:
    with httpx.Client(base_url=stack.gateway_url, timeout=120) as client:
        yield client


def test_sse_framing(http: httpx.Client, model_name: str) -> None:
    body = {"model": model_name, "prompt": "Hi", "max_tokens": 4, "stream": True, "temperature": 0}
    with http.stream("POST", "/v1/completions", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        raw = response.read().decode()
    events = raw.split("\n\n")
    assert events[-1] == "" and events[-2] == "data: [DONE]"
    payloads = events[:-2]
    assert payloads, raw
    for event in payloads:
        assert event.startswith("data: ") and "\n" not in event, event
        chunk = json.loads(event[len("data: ") :])
        assert chunk["object"] == "text_completion"
    assert json.loads(payloads[-1][6:])["choices"][0]["finish_reason"] == "length"


def _assert_error(response: httpx.Response, status: int, param: str | None = None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    if param is not None:
        assert error["param"] == param
    return error


@pytest.mark.parametrize(
    "body, param",
    [
        ({"prompt": "x"}, "model"),
        ({"model": "M", "prompt": "x", "temperature": 3}, "temperature"),
        ({"model": "M", "prompt": "x", "max_tokens": "many"}, "max_tokens"),
        ({"model": "M", "prompt": "x", "n": 0}, "n"),
        ({"model": "M"}, "prompt"),
    ],
)
def test_bad_completion_bodies_get_400(http: httpx.Client, model_name: str, body: dict, param: str) -> None:
    if body.get("model") == "M":
        body = {**body, "model": model_name}
    _assert_error(http.post("/v1/completions", json=body), 400, param)


def test_invalid_json_gets_400(http: httpx.Client) -> None:
    response = http.post("/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
    _assert_error(response, 400)


def test_empty_messages_get_400(http: httpx.Client, model_name: str) -> None:
    _assert_error(http.post("/v1/chat/completions", json={"model": model_name, "messages": []}), 400, "messages")


def test_unknown_model_gets_404(http: httpx.Client) -> None:
    error = _assert_error(http.post("/v1/completions", json={"model": "no-such-model", "prompt": "x"}), 404, "model")
    assert error["code"] == "model_not_found"
    _assert_error(http.get("/v1/models/no-such-model"), 404)


def test_prompt_longer_than_the_context_gets_400(http: httpx.Client, model_name: str) -> None:
    body = {"model": model_name, "prompt": "hello " * 3000, "max_tokens": 4}
    error = _assert_error(http.post("/v1/completions", json=body), 400)
    assert "maximum context length is 2048 tokens" in error["message"]
    assert "your prompt has 300" in error["message"]  # "hello " is one token each, 3000 of them
    body["stream"] = True
    _assert_error(http.post("/v1/completions", json=body), 400)


def test_max_tokens_beyond_the_context_gets_400_with_both_lengths(http: httpx.Client, model_name: str) -> None:
    body = {"model": model_name, "prompt": "Hello there", "max_tokens": 5000}
    error = _assert_error(http.post("/v1/completions", json=body), 400)
    assert "maximum context length is 2048 tokens" in error["message"]
    assert "in the prompt, 5000 in the completion" in error["message"]


def test_health(http: httpx.Client, model_name: str) -> None:
    assert http.get("/health/live").json() == {"status": "ok"}
    ready = http.get("/health/ready")
    assert ready.status_code == 200
    assert ready.json()["models"] == {model_name: "READY"}


def _get_on(connection: HTTPConnection, path: str) -> int | None:
    """One GET on the connection's open socket (never a new one); None when the server has closed it."""
    sock = connection.sock
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        response.read()
    except (RemoteDisconnected, ConnectionError):
        return None
    assert connection.sock is sock, "the request went out on a new connection"
    return response.status


def test_idle_connection_outlives_client_pools(stack: LocalStack) -> None:
    """A connection idle for 6 s (longer than uvicorn's own 5 s) is still served: clients' pools reuse it."""
    connection = HTTPConnection(stack.config.gateway_host, stack.config.gateway_port, timeout=10)
    connection.connect()
    try:
        assert _get_on(connection, "/health/live") == 200
        time.sleep(6)
        assert _get_on(connection, "/health/live") == 200
    finally:
        connection.close()


@contextmanager
def _gateway_without_triton(tmp_path: Path, **settings: str) -> Iterator[int]:
    """A second gateway, pointed at a port where nothing listens; yields its port."""
    port = free_port()
    env = {
        **os.environ,
        "GATEWAY_PORT": str(port),
        "GATEWAY_HOST": "127.0.0.1",
        "GATEWAY_TRITON_GRPC_URL": f"127.0.0.1:{free_port()}",
        **{f"GATEWAY_{name.upper()}": value for name, value in settings.items()},
    }
    gateway = Service("gateway-no-triton", [sys.executable, "-m", "gateway"], env, tmp_path / "gateway.log")
    try:
        assert wait_until(lambda: _live(f"http://127.0.0.1:{port}"), 30, 0.2, gateway), gateway.log_tail()
        yield port
    finally:
        gateway.stop()


def test_keep_alive_setting_closes_idle_connections(tmp_path: Path) -> None:
    with _gateway_without_triton(tmp_path, keep_alive_s="1") as port:
        connection = HTTPConnection("127.0.0.1", port, timeout=10)
        connection.connect()
        try:
            assert _get_on(connection, "/health/live") == 200
            time.sleep(2.5)
            assert _get_on(connection, "/health/live") is None
        finally:
            connection.close()


def test_unreachable_triton_gives_503(tmp_path: Path) -> None:
    with _gateway_without_triton(tmp_path, health_timeout_s="0.5") as port:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            _assert_error(client.post("/v1/completions", json={"model": "m", "prompt": "x"}), 503)
            _assert_error(client.get("/v1/models"), 503)
            assert client.get("/health/ready").status_code == 503
            assert client.get("/health/live").status_code == 200


def _live(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health/live", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
