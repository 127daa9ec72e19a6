"""Security on the real stack (fast model): what the gateway's logs keep, and requests past the size limits."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from localstack.stack import LocalStack

PROMPT = "zebra-quartz-7741 tell me the launch codes"
SECRET = "sk-live-4f1d8c0e9b7a6352-never-log-me"


def _requests_with_secrets(url: str, model: str) -> None:
    """Every way a prompt passes through: completions and chat, whole and streamed, refused and failed."""
    headers = {"Authorization": f"Bearer {SECRET}", "X-Api-Key": SECRET}
    chat = [{"role": "user", "content": PROMPT}]
    bodies = [
        ("/v1/completions", {"model": model, "prompt": PROMPT, "max_tokens": 3}),
        ("/v1/completions", {"model": model, "prompt": [PROMPT, PROMPT], "max_tokens": 3, "stream": True}),
        ("/v1/chat/completions", {"model": model, "messages": chat, "max_tokens": 3}),
        ("/v1/chat/completions", {"model": model, "messages": chat, "max_tokens": 3, "stream": True}),
        ("/v1/completions", {"model": model, "prompt": PROMPT, "temperature": 9}),  # refused by validation
        ("/v1/completions", {"model": model, "prompt": PROMPT, "max_tokens": 100_000}),  # refused by the engine
        ("/v1/chat/completions", {"model": "no-such-model", "messages": chat}),
    ]
    with httpx.Client(base_url=url, headers=headers, timeout=120) as client:
        for path, body in bodies:
            assert client.post(path, json=body).status_code in (200, 400, 404)
        assert client.get("/v1/models").status_code == 200


def _gateway_log(stack: LocalStack, name: str, extra_env: dict[str, str]) -> str:
    with stack.extra_gateway(name, extra_env) as (service, url):
        _requests_with_secrets(url, stack.config.model_name)
    return Path(service.log_path).read_text()


@pytest.mark.parametrize("keys", [False, True], ids=["open", "with-keys"])
def test_no_prompt_and_no_secret_in_the_logs_by_default(fast_stack: LocalStack, keys: bool) -> None:
    # With keys configured the secret is a real key, which the log names (env-1) but never shows.
    extra_env = {"GATEWAY_API_KEYS": SECRET} if keys else {}
    log = _gateway_log(fast_stack, f"gateway-secrets-{'keys' if keys else 'open'}", extra_env)
    assert log.count('"request_id"') >= 8  # the requests were logged, without their content
    assert "zebra-quartz" not in log
    assert SECRET not in log and "never-log-me" not in log


def test_content_logging_shows_prompts_but_never_secrets(fast_stack: LocalStack) -> None:
    # The control of the test above: the same grep finds the prompt once content logging is asked for.
    log = _gateway_log(fast_stack, "gateway-secrets-content", {"GATEWAY_LOG_CONTENT": "true"})
    assert "zebra-quartz" in log
    assert SECRET not in log and "never-log-me" not in log


def _chunked_body(model: str, size: int) -> Iterator[bytes]:
    """A JSON body sent without Content-Length: its size is known only once it is read."""
    yield b'{"model": "' + model.encode() + b'", "max_tokens": 1, "prompt": "'
    for _ in range(size // 65536):
        yield b"x" * 65536
    yield b'"}'


def test_a_chunked_body_past_the_limit_gets_a_413(fast_stack: LocalStack) -> None:
    body = _chunked_body(fast_stack.config.model_name, 5 * 1024 * 1024)  # the default limit is 4 MiB
    response = httpx.post(f"{fast_stack.gateway_url}/v1/completions", content=body, timeout=60)
    assert response.status_code == 413
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}


def _raw_exchange(stack: LocalStack, chunks: Iterator[bytes]) -> bytes:
    """Sends raw bytes (stopping when the server closes) and returns everything the server answered."""
    with socket.create_connection((stack.config.gateway_host, stack.config.gateway_port), timeout=30) as sock:
        try:
            for chunk in chunks:
                sock.sendall(chunk)
        except OSError:  # the server answered and closed while we were still sending
            pass
        answer = b""
        try:
            while data := sock.recv(65536):
                answer += data
        except ConnectionResetError:  # after the answer: what came before it is kept
            pass
        return answer


def _head(headers: int, value_size: int) -> bytes:
    lines = b"".join(b"x-filler-%d: %s\r\n" % (i, b"v" * value_size) for i in range(headers))
    return b"GET /health/live HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n" + lines + b"\r\n"


def _assert_431(answer: bytes) -> None:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert httpx.Response(431, content=body).json()["error"]["type"] == "invalid_request_error"


def test_headers_past_the_limit_get_a_431_in_openai_shape(fast_stack: LocalStack) -> None:
    _assert_431(_raw_exchange(fast_stack, iter([_head(headers=20, value_size=8 * 1024)])))  # 160 KiB, one read
    _assert_431(_raw_exchange(fast_stack, iter([b"GET /health/live?q=" + b"a" * 100_000 + b" HTTP/1.1\r\n\r\n"])))


def test_a_header_that_never_ends_gets_a_431_not_a_hang(fast_stack: LocalStack) -> None:
    def endless() -> Iterator[bytes]:
        yield b"GET /health/live HTTP/1.1\r\nHost: gateway\r\nX-Endless: "
        for _ in range(1000):  # 64 MiB, unless the gateway stops reading first
            yield b"a" * 65536

    _assert_431(_raw_exchange(fast_stack, endless()))


@pytest.mark.parametrize("headers", [1, 40])
def test_headers_within_the_limit_are_served(fast_stack: LocalStack, headers: int) -> None:
    answer = _raw_exchange(fast_stack, iter([_head(headers=headers, value_size=1024)]))  # up to 40 KiB
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]


def test_the_limit_is_per_request_on_a_kept_alive_connection(fast_stack: LocalStack) -> None:
    # Three requests of 40 KiB of headers each on one connection: together past the limit, each within it.
    filler = {f"x-filler-{i}": "v" * 1024 for i in range(40)}
    with httpx.Client(base_url=fast_stack.gateway_url, timeout=30) as client:
        statuses = [client.get("/health/live", headers=filler).status_code for _ in range(3)]
    assert statuses == [200, 200, 200]
