"""Failures of the engine and of Triton, seen through the gateway. Runs last: it breaks the shared stack
and brings it back."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from localstack.stack import LocalStack
from tests.metrics_text import sample_value

pytestmark = pytest.mark.disruptive


def _ready_status(client: httpx.Client) -> int:
    return client.get("/health/ready").status_code


def _wait_status(client: httpx.Client, status: int, timeout_s: float) -> float:
    """Seconds until readiness answers `status`; fails after `timeout_s`."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if _ready_status(client) == status:
            return time.monotonic() - started
        time.sleep(0.2)
    pytest.fail(f"readiness did not turn {status} within {timeout_s} s")


def test_killed_engine_makes_the_gateway_not_ready(stack: LocalStack, model_name: str) -> None:
    with httpx.Client(base_url=stack.gateway_url, timeout=30) as client:
        assert _ready_status(client) == 200
        engines = stack.engine_processes()
        assert engines, "no engine process found"
        for process in engines:
            process.kill()
        took = _wait_status(client, 503, timeout_s=15)
        body = client.get("/health/ready").json()
        assert body["status"] == "unavailable" and model_name in body["reason"]
        response = client.post("/v1/completions", json={"model": model_name, "prompt": "x", "max_tokens": 2})
        assert response.status_code in (404, 503), response.text
        print(f"readiness turned 503 {took:.1f} s after the engine was killed")
    # Bring the model back through Triton's repository API (the stock behaviour unloaded it).
    httpx.post(f"{stack.triton_http_url}/v2/repository/models/{model_name}/load", timeout=600).raise_for_status()
    with httpx.Client(base_url=stack.gateway_url, timeout=30) as client:
        _wait_status(client, 200, timeout_s=30)


def test_engine_restart_brings_the_model_back_by_itself(stack: LocalStack, model_name: str) -> None:
    """Opt-in (RESTART_UNHEALTHY_ENGINE): a dead engine is restarted in place instead of unloading the model."""
    config = {
        "backend": "vllm",
        "instance_group": [{"count": 1, "kind": "KIND_MODEL"}],
        "parameters": {
            key: {"string_value": "true"}
            for key in ("REPORT_CUSTOM_METRICS", "ENABLE_VLLM_HEALTH_CHECK", "RESTART_UNHEALTHY_ENGINE")
        },
    }
    # One engine at a time on this machine: unload before loading the new configuration.
    repository = f"{stack.triton_http_url}/v2/repository"
    httpx.post(f"{repository}/models/{model_name}/unload", timeout=120).raise_for_status()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and stack.engine_processes():
        time.sleep(0.5)
    assert not stack.engine_processes(), "the engine outlived the unload"
    load = httpx.post(
        f"{repository}/models/{model_name}/load",
        json={"parameters": {"config": json.dumps(config)}},
        timeout=600,
    )
    load.raise_for_status()
    with httpx.Client(base_url=stack.gateway_url, timeout=30) as client:
        _wait_status(client, 200, timeout_s=30)
        for process in stack.engine_processes():
            process.kill()
        _wait_status(client, 503, timeout_s=15)
        body = client.get("/health/ready").json()
        assert body["models"][model_name] == "ENGINE_UNHEALTHY", body
        response = client.post("/v1/completions", json={"model": model_name, "prompt": "x", "max_tokens": 2})
        assert response.status_code == 503, response.text
        took = _wait_status(client, 200, timeout_s=600)
        print(f"the engine came back {took:.0f} s after it was found dead")
        reply = client.post("/v1/completions", json={"model": model_name, "prompt": "Hello", "max_tokens": 3})
        assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 3


def test_triton_down_then_back_without_restarting_the_gateway(stack: LocalStack, model_name: str) -> None:
    with httpx.Client(base_url=stack.gateway_url, timeout=30) as client:
        assert _ready_status(client) == 200
        gateway_pid = stack.gateway.pid
        stack.kill_triton()
        took = _wait_status(client, 503, timeout_s=5)
        started = time.monotonic()
        metrics = client.get("/metrics")
        scrape_s = time.monotonic() - started
        assert metrics.status_code == 200
        assert sample_value(metrics.text, "gateway_federation_up") == 0.0
        assert scrape_s < 2.0
        assert client.post("/v1/completions", json={"model": model_name, "prompt": "x"}).status_code == 503
        print(f"readiness turned 503 after {took:.1f} s; /metrics took {scrape_s * 1000:.0f} ms with Triton down")

        stack.restart_triton()
        _wait_status(client, 200, timeout_s=30)
        assert stack.gateway.pid == gateway_pid and stack.gateway.running()
        reply = client.post("/v1/completions", json={"model": model_name, "prompt": "Hello", "max_tokens": 3})
        assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 3
        assert sample_value(client.get("/metrics").text, "gateway_federation_up") == 1.0
