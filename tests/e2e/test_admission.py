"""Keys, per-key limits and admission control on the real stack (the fast model), each case on gateways of its
own in front of the `fast_stack` Triton; the shared case on two gateways and a real redis-server."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from localstack.processes import wait_until
from localstack.stack import LocalStack
from tests.metrics_text import sample_value

# A stream still running when the next request arrives: 64 choices of 2,000 tokens keep even the fast engine
# busy for seconds (a smaller one is written into socket buffers and over before the next request).
LONG_TOKENS, LONG_N = 2000, 64


def _key_lines(model: str) -> list[dict]:
    return [
        {"name": "full", "key": "sk-full"},
        {"name": "limited", "key": "sk-limited", "rpm": 1000, "tpm": 1000000},
        {"name": "other-models", "key": "sk-other", "models": ["not-this-one"]},
        {"name": "this-model", "key": "sk-this", "models": [model]},
        {"name": "rpm2", "key": "sk-rpm2", "rpm": 2},
        {"name": "par1", "key": "sk-par1", "parallel": 1},
        {"name": "tpm", "key": "sk-tpm", "tpm": 10000},
        {"name": "tpm-small", "key": "sk-tpm-small", "tpm": 30},
    ]


def _write_keys(path: Path, entries: list[dict]) -> None:
    """Replaces the file by a rename, as editors and Kubernetes do."""
    draft = path.with_suffix(".draft")
    draft.write_text("".join(json.dumps(entry) + "\n" for entry in entries))
    os.replace(draft, path)


@contextmanager
def _gateway(fast_stack: LocalStack, name: str, env: dict[str, str]) -> Iterator[str]:
    with fast_stack.extra_gateway(name, env) as (_, url):
        yield url


@pytest.fixture(scope="module")
def keys_file(tmp_path_factory: pytest.TempPathFactory, fast_stack: LocalStack) -> Path:
    path = tmp_path_factory.mktemp("keys") / "keys.jsonl"
    _write_keys(path, _key_lines(fast_stack.config.model_name))
    return path


@pytest.fixture(scope="module")
def keyed(fast_stack: LocalStack, keys_file: Path) -> Iterator[str]:
    with _gateway(fast_stack, "gateway-keys", {"GATEWAY_API_KEYS_FILE": str(keys_file)}) as url:
        yield url


@pytest.fixture(scope="module")
def model(fast_stack: LocalStack) -> str:
    return fast_stack.config.model_name


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _complete(url: str, key: str | None, model: str, **body: object) -> httpx.Response:
    payload = {"model": model, "prompt": "Hello", "max_tokens": 2, "ignore_eos": True, **body}
    return httpx.post(f"{url}/v1/completions", json=payload, headers=_auth(key) if key else {}, timeout=60)


@contextmanager
def _open_stream(url: str, key: str | None, model: str) -> Iterator[None]:
    """A long stream, open after its first event; leaving the block disconnects the client.

    A raw socket, no longer read once the first event is in, and closed with unread data: an abrupt
    disconnect."""
    body = json.dumps({"model": model, "prompt": "Hold", "max_tokens": LONG_TOKENS, "n": LONG_N, "ignore_eos": True,
                       "stream": True}).encode()  # fmt: skip
    host, port = url.removeprefix("http://").split(":")
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    head = f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{auth}"
    with socket.socket() as sock:
        sock.settimeout(60)
        sock.connect((host, int(port)))
        sock.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
        received = b""
        while b"data: {" not in received:
            chunk = sock.recv(4096)
            assert chunk, received
            received += chunk
        assert received.startswith(b"HTTP/1.1 200"), received[:200]
        yield


def _stream_usage(url: str, key: str, model: str, max_tokens: int) -> dict:
    body = {"model": model, "prompt": "Count me", "max_tokens": max_tokens, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    with httpx.stream("POST", f"{url}/v1/completions", json=body, headers=_auth(key), timeout=60) as reply:
        assert reply.status_code == 200
        events = [line[6:] for line in reply.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return json.loads(events[-2])["usage"]


def _key_tokens(url: str, name: str) -> float:
    return sample_value(httpx.get(f"{url}/metrics").text, "gateway_key_tokens_total", key=name) or 0.0


def _assert_error(response: httpx.Response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == code
    return error


def test_no_key_or_a_wrong_key_gets_401(keyed: str, model: str) -> None:
    for key in (None, "sk-wrong"):
        _assert_error(_complete(keyed, key, model), 401, "invalid_api_key")
        assert httpx.get(f"{keyed}/v1/models", headers=_auth(key) if key else {}).status_code == 401


def test_health_stays_open(keyed: str) -> None:
    assert httpx.get(f"{keyed}/health/live").status_code == 200
    assert httpx.get(f"{keyed}/health/ready").status_code == 200


def test_a_good_key_streams_and_completes_with_ratelimit_headers(keyed: str, model: str) -> None:
    plain = _complete(keyed, "sk-full", model)
    assert plain.status_code == 200 and plain.json()["usage"]["completion_tokens"] == 2
    assert not any(name.startswith("x-ratelimit") for name in plain.headers)  # no limits, no headers
    limited = _complete(keyed, "sk-limited", model)
    assert limited.status_code == 200
    assert limited.headers["x-ratelimit-limit-requests"] == "1000"
    assert int(limited.headers["x-ratelimit-remaining-requests"]) < 1000
    assert limited.headers["x-ratelimit-limit-tokens"] == "1000000"
    assert limited.headers["x-ratelimit-reset-requests"].endswith("s")
    listing = httpx.get(f"{keyed}/v1/models", headers=_auth("sk-limited"))
    for other in (listing, _complete(keyed, "sk-limited", "nope")):  # not only generations
        assert other.headers["x-ratelimit-limit-requests"] == "1000", other.headers
    body = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "stream": True}
    with httpx.stream("POST", f"{keyed}/v1/chat/completions", json=body, headers=_auth("sk-limited")) as reply:
        assert reply.status_code == 200 and reply.headers["x-ratelimit-limit-requests"] == "1000"
        assert list(reply.iter_lines())[-2] == "data: [DONE]"


def test_a_model_the_key_may_not_use_is_as_unknown_as_a_missing_one(keyed: str, model: str) -> None:
    hidden = _assert_error(_complete(keyed, "sk-other", model), 404, "model_not_found")
    missing = _assert_error(_complete(keyed, "sk-full", "no-such-model"), 404, "model_not_found")
    assert hidden["message"] == missing["message"].replace("no-such-model", model)
    listed = httpx.get(f"{keyed}/v1/models", headers=_auth("sk-other")).json()
    assert listed["data"] == []
    assert httpx.get(f"{keyed}/v1/models/{model}", headers=_auth("sk-other")).status_code == 404
    allowed = httpx.get(f"{keyed}/v1/models", headers=_auth("sk-this")).json()
    assert [entry["id"] for entry in allowed["data"]] == [model]
    assert _complete(keyed, "sk-this", model).status_code == 200


def test_requests_per_minute_give_429_with_retry_after_and_headers(keyed: str, model: str) -> None:
    first, second, third = (_complete(keyed, "sk-rpm2", model) for _ in range(3))
    assert [first.status_code, second.status_code] == [200, 200]
    assert [first.headers["x-ratelimit-remaining-requests"], second.headers["x-ratelimit-remaining-requests"]] == [
        "1",
        "0",
    ]
    error = _assert_error(third, 429, "rate_limit_exceeded")
    assert error["type"] == "requests" and "rpm2" in error["message"] and "sk-rpm2" not in error["message"]
    assert 1 <= int(third.headers["retry-after"]) <= 60
    assert third.headers["x-ratelimit-limit-requests"] == "2"
    assert third.headers["x-ratelimit-remaining-requests"] == "0"
    assert third.headers["x-ratelimit-reset-requests"]
    metrics = httpx.get(f"{keyed}/metrics").text
    assert sample_value(metrics, "gateway_rejections_total", reason="rate_limit", key="rpm2") == 1
    assert "sk-rpm2" not in metrics


def test_the_parallel_slot_is_freed_when_a_streaming_client_disconnects(keyed: str, model: str) -> None:
    with _open_stream(keyed, "sk-par1", model):
        refused = _complete(keyed, "sk-par1", model)
        _assert_error(refused, 429, "rate_limit_exceeded")
        assert refused.headers["retry-after"] == "1"
    # The client went away mid-stream: its slot comes back without waiting for the rest of the stream.
    assert wait_until(lambda: _complete(keyed, "sk-par1", model).status_code == 200, 60, 0.2)
    metrics = httpx.get(f"{keyed}/metrics").text
    assert sample_value(metrics, "gateway_client_disconnects_total", model=model, endpoint="completions") == 1


def test_tokens_per_minute_count_a_streamed_requests_usage(keyed: str, model: str) -> None:
    usage = _stream_usage(keyed, "sk-tpm", model, max_tokens=20)
    assert usage["completion_tokens"] == 20
    after = _complete(keyed, "sk-tpm", model)
    assert after.status_code == 200
    assert int(after.headers["x-ratelimit-remaining-tokens"]) == 10000 - usage["total_tokens"]
    counted = _key_tokens(keyed, "tpm")
    assert counted == usage["total_tokens"] + after.json()["usage"]["total_tokens"]

    # A stream cut short counts what it generated until then.
    with _open_stream(keyed, "sk-tpm", model):
        pass
    assert wait_until(lambda: _key_tokens(keyed, "tpm") > counted, 60, 0.2)

    assert _stream_usage(keyed, "sk-tpm-small", model, max_tokens=40)["total_tokens"] > 30
    refused = _complete(keyed, "sk-tpm-small", model)
    error = _assert_error(refused, 429, "rate_limit_exceeded")
    assert error["type"] == "tokens"
    assert refused.headers["x-ratelimit-remaining-tokens"] == "0" and int(refused.headers["retry-after"]) >= 1


def test_the_keys_file_is_read_again_when_it_changes(keyed: str, keys_file: Path, model: str) -> None:
    entries = _key_lines(model)
    _write_keys(keys_file, [*entries[1:], {"name": "late", "key": "sk-late"}])  # "full" goes, "late" comes
    try:
        assert wait_until(lambda: _complete(keyed, "sk-late", model).status_code == 200, 20, 0.2)
        _assert_error(_complete(keyed, "sk-full", model), 401, "invalid_api_key")
    finally:
        _write_keys(keys_file, entries)
    assert wait_until(lambda: _complete(keyed, "sk-full", model).status_code == 200, 20, 0.2)


def test_past_max_in_flight_and_max_queued_a_request_gets_503(fast_stack: LocalStack, model: str) -> None:
    env = {"GATEWAY_MAX_IN_FLIGHT": "1", "GATEWAY_MAX_QUEUED": "0"}
    with _gateway(fast_stack, "gateway-cap", env) as url:
        with _open_stream(url, None, model):
            busy = _complete(url, None, model)
            _assert_error(busy, 503, "server_busy")
            assert busy.headers["retry-after"] == "1"
            assert httpx.get(f"{url}/health/live").status_code == 200  # probes bypass admission
            metrics = httpx.get(f"{url}/metrics").text
            assert sample_value(metrics, "gateway_admission_in_flight") == 1
            assert sample_value(metrics, "gateway_rejections_total", reason="queue_full", key="none") == 1
        assert wait_until(lambda: _complete(url, None, model).status_code == 200, 60, 0.2)
        metrics = httpx.get(f"{url}/metrics").text
        assert sample_value(metrics, "gateway_client_disconnects_total", model=model, endpoint="completions") == 1
        assert sample_value(metrics, "gateway_admission_in_flight") == 0


def test_two_gateways_on_one_redis_enforce_one_limit(fast_stack: LocalStack, model: str, redis_url: str,
                                                      tmp_path: Path) -> None:  # fmt: skip
    keys = tmp_path / "keys.jsonl"
    _write_keys(keys, [{"name": "shared", "key": "sk-shared", "rpm": 3},
                       {"name": "shared-par", "key": "sk-shared-par", "parallel": 1}])  # fmt: skip
    env = {"GATEWAY_API_KEYS_FILE": str(keys), "GATEWAY_REDIS_URL": redis_url}
    with _gateway(fast_stack, "gateway-redis-1", env) as one, _gateway(fast_stack, "gateway-redis-2", env) as two:
        statuses = [_complete(url, "sk-shared", model).status_code for url in (one, two, one, two, one)]
        assert statuses == [200, 200, 200, 429, 429]  # three in all, not three each
        with _open_stream(one, "sk-shared-par", model):
            _assert_error(_complete(two, "sk-shared-par", model), 429, "rate_limit_exceeded")
        assert wait_until(lambda: _complete(two, "sk-shared-par", model).status_code == 200, 60, 0.2)
