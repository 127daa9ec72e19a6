"""Metrics, federation, request ids and request logs, on the real stack."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from localstack.stack import LocalStack
from tests.metrics_text import sample_value


@pytest.fixture(scope="module")
def http(stack: LocalStack) -> httpx.Client:
    with httpx.Client(base_url=stack.gateway_url, timeout=120) as client:
        yield client


def _engine_counts(http: httpx.Client, model: str) -> tuple[float, float]:
    text = http.get("/metrics").text
    prompt = sample_value(text, "vllm:prompt_tokens_total", model=model)
    generation = sample_value(text, "vllm:generation_tokens_total", model=model)
    return prompt or 0.0, generation or 0.0


def test_engine_token_counters_rise_by_exactly_the_usage(http: httpx.Client, model_name: str) -> None:
    before = _engine_counts(http, model_name)
    body = {"model": model_name, "prompt": "Counting tokens exactly:", "max_tokens": 9, "temperature": 0}
    usage = http.post("/v1/completions", json=body).json()["usage"]
    expected = (before[0] + usage["prompt_tokens"], before[1] + usage["completion_tokens"])
    deadline = time.monotonic() + 10  # the backend reports its statistics asynchronously
    after = _engine_counts(http, model_name)
    while after != expected and time.monotonic() < deadline:
        time.sleep(0.2)
        after = _engine_counts(http, model_name)
    assert after == expected


def test_metrics_have_gateway_http_llm_and_federated_families(http: httpx.Client, model_name: str) -> None:
    http.post("/v1/chat/completions", json={"model": model_name, "messages": [{"role": "user", "content": "Hi"}],
                                            "max_tokens": 3})  # fmt: skip
    response = http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    for family in (
        "http_requests_total",  # prometheus-fastapi-instrumentator
        "gateway_requests_total",
        "gateway_time_to_first_token_seconds_bucket",
        "gateway_completion_tokens_total",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
        "nv_inference_request_success",
    ):
        assert f"\n{family}" in text, family
    assert sample_value(text, "gateway_federation_up") == 1.0
    assert sample_value(text, "gateway_requests_total", model=model_name, endpoint="chat", outcome="ok") >= 1
    # Buckets of the engine's histograms as the backend declared them.
    assert 'le="0.001"' in text.split("vllm:time_to_first_token_seconds_bucket", 1)[1].split("\n", 1)[0]


def test_no_family_is_declared_twice(http: httpx.Client) -> None:
    types = [line.split()[2] for line in http.get("/metrics").text.splitlines() if line.startswith("# TYPE ")]
    assert len(types) == len(set(types))


def test_request_id_round_trips_to_triton_and_the_log(http: httpx.Client, stack: LocalStack, model_name: str) -> None:
    request_id = f"test-req-{time.time_ns()}"
    body = {"model": model_name, "prompt": "Hi", "max_tokens": 2}
    response = http.post("/v1/completions", json=body, headers={"X-Request-Id": request_id})
    assert response.headers["x-request-id"] == request_id
    generated = http.post("/v1/completions", json=body).headers["x-request-id"]
    assert generated and generated != request_id
    deadline = time.monotonic() + 5
    line = None
    while line is None and time.monotonic() < deadline:
        lines = stack.gateway.log_path.read_text().splitlines()
        line = next((json.loads(x) for x in lines if x.startswith("{") and request_id in x), None)
        time.sleep(0.1)
    assert line is not None
    assert line["triton_request_id"] == request_id
    assert line["model"] == model_name and line["endpoint"] == "completions" and line["status"] == 200
    assert line["prompt_tokens"] >= 1 and line["completion_tokens"] == 2
    assert line["ttft_s"] > 0 and line["duration_s"] >= line["ttft_s"]
    assert line["client_disconnected"] is False
    assert "prompt" not in line and "output" not in line  # content is not logged by default


def test_content_logging_puts_prompts_and_outputs_in_the_log(stack: LocalStack, model_name: str) -> None:
    with stack.extra_gateway("gateway-log-content", {"GATEWAY_LOG_CONTENT": "true"}) as (service, url):
        chat = {"model": model_name, "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 3}
        reply = httpx.post(f"{url}/v1/chat/completions", json=chat, timeout=120).json()
        completion = {"model": model_name, "prompt": "Once upon", "max_tokens": 3, "stream": True}
        httpx.post(f"{url}/v1/completions", json=completion, timeout=120).raise_for_status()
    lines = [json.loads(x) for x in service.log_path.read_text().splitlines() if x.startswith('{"request_id"')]
    by_endpoint = {line["endpoint"]: line for line in lines if "endpoint" in line}
    assert by_endpoint["chat"]["prompt"] == [{"role": "user", "content": "Say hi"}]
    assert by_endpoint["chat"]["output"] == reply["choices"][0]["message"]["content"]
    assert by_endpoint["completions"]["prompt"] == "Once upon" and by_endpoint["completions"]["output"]


def test_body_over_the_limit_gets_413(http: httpx.Client, model_name: str) -> None:
    body = {"model": model_name, "prompt": "x" * (5 * 1024 * 1024)}
    response = http.post("/v1/completions", json=body)
    assert response.status_code == 413
    assert response.json()["error"]["message"]


def test_metrics_pass_the_exposition_format_checks(http: httpx.Client, stack: LocalStack) -> None:
    import subprocess

    from prometheus_client.parser import text_string_to_metric_families

    text = http.get("/metrics").text
    families = list(text_string_to_metric_families(text))  # raises on malformed text
    assert len(families) > 20
    promtool = stack.config.cache.root / "promtool" / "usr" / "bin" / "promtool"
    assert promtool.is_file(), "scripts/install.sh unpacks promtool; run it"
    check = subprocess.run([str(promtool), "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    report = check.stdout + check.stderr
    # 0: clean; 3: naming advice only. Format errors are exit code 1.
    assert check.returncode in (0, 3) and "error" not in report, report
    for line in filter(None, report.splitlines()):
        # The only advice is about Triton's and vLLM's own names, which federation keeps intact on purpose.
        assert line.startswith(("nv_inference_", "vllm:")), line
