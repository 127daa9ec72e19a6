"""Failures of the engine and of Triton, seen through the gateway. Runs last: it breaks the shared stack
and brings it back."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import httpx
import pytest

from localstack.processes import wait_until
from localstack.stack import LocalStack
from tests.metrics_text import sample_value
from tests.placement_checks import assert_reloaded_engine_placed

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


# The model's configuration with RESTART_UNHEALTHY_ENGINE (opt-in): a dead engine is restarted in place.
RESTART_CONFIG = {
    "backend": "vllm",
    "instance_group": [{"count": 1, "kind": "KIND_MODEL"}],
    "parameters": {
        key: {"string_value": "true"}
        for key in ("REPORT_CUSTOM_METRICS", "ENABLE_VLLM_HEALTH_CHECK", "RESTART_UNHEALTHY_ENGINE")
    },
}


def _load_restarting(stack: LocalStack, model_name: str) -> None:
    """Loads the model with RESTART_CONFIG (one engine at a time on this machine: none may be loaded)."""
    httpx.post(
        f"{stack.triton_http_url}/v2/repository/models/{model_name}/load",
        json={"parameters": {"config": json.dumps(RESTART_CONFIG)}},
        timeout=600,
    ).raise_for_status()


def _restarts_engine(stack: LocalStack, model_name: str) -> bool:
    config = httpx.get(f"{stack.triton_http_url}/v2/models/{model_name}/config", timeout=30).json()
    return config.get("parameters", {}).get("RESTART_UNHEALTHY_ENGINE", {}).get("string_value") == "true"


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
    # Bring the model back through Triton's repository API (the stock behaviour unloaded it), with the engine
    # restart on: the next test needs it, and each load is an engine start.
    _load_restarting(stack, model_name)
    with httpx.Client(base_url=stack.gateway_url, timeout=30) as client:
        _wait_status(client, 200, timeout_s=30)
    assert_reloaded_engine_placed(stack)


def test_engine_restart_brings_the_model_back_by_itself(stack: LocalStack, model_name: str) -> None:
    """Opt-in (RESTART_UNHEALTHY_ENGINE): a dead engine is restarted in place instead of unloading the model."""
    if not _restarts_engine(stack, model_name):  # run alone: test_killed_engine loaded it so otherwise
        # One engine at a time on this machine: unload before loading the new configuration.
        httpx.post(f"{stack.triton_http_url}/v2/repository/models/{model_name}/unload", timeout=120).raise_for_status()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and stack.engine_processes():
            time.sleep(0.5)
        assert not stack.engine_processes(), "the engine outlived the unload"
        _load_restarting(stack, model_name)
    assert _restarts_engine(stack, model_name)
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
    # Without REPORT_TIME_PER_OUTPUT_TOKEN, as in a stock backend's configuration: the per-token histogram is
    # there (the project's own configuration leaves it out), one observation after each token but the first.
    def per_token_observations() -> float:
        text = httpx.get(stack.triton_metrics_url, timeout=5).text
        return sample_value(text, "vllm:time_per_output_token_seconds_count", model=model_name) or 0.0

    assert wait_until(lambda: per_token_observations() >= 2, 10, 0.2), per_token_observations()


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


def test_a_crashed_stub_leaves_no_engine_process(stack: LocalStack, model_name: str) -> None:
    engines = stack.engine_processes()
    assert engines
    stubs = [p for p in stack.triton.descendants() if "triton_python_backend_stub" in " ".join(p.cmdline())]
    for stub in stubs:
        stub.kill()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(p.is_running() and p.status() != "zombie" for p in engines):
        time.sleep(0.2)
    assert not [p.pid for p in engines if p.is_running() and p.status() != "zombie"], "the engine outlived its stub"
    api = f"{stack.triton_http_url}/v2/repository/models/{model_name}"
    httpx.post(f"{api}/unload", timeout=120)
    httpx.post(f"{api}/load", timeout=600).raise_for_status()
    with httpx.Client(base_url=stack.gateway_url, timeout=30) as client:
        _wait_status(client, 200, timeout_s=60)


def _write_adapter(folder: Path, scale: float, layers: int = 30, rank: int = 8) -> Path:
    """A LoRA adapter on q_proj and v_proj of SmolLM2-135M; zero weights leave the model unchanged."""
    import torch
    from safetensors.torch import save_file

    generator = torch.Generator().manual_seed(0)
    tensors = {}
    for layer in range(layers):
        for module, out_dim in (("q_proj", 576), ("v_proj", 192)):
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{module}"
            tensors[f"{prefix}.lora_A.weight"] = torch.randn(rank, 576, generator=generator) * scale
            tensors[f"{prefix}.lora_B.weight"] = torch.randn(out_dim, rank, generator=generator) * scale
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank, "lora_alpha": rank, "lora_dropout": 0.0,
              "target_modules": ["q_proj", "v_proj"], "bias": "none", "fan_in_fan_out": False}  # fmt: skip
    (folder / "adapter_config.json").write_text(json.dumps(config))
    return folder


def test_multi_lora_end_to_end(stack: LocalStack, model_name: str) -> None:
    """Adapters made here, served through multi_lora.json and chosen per request with lora_name."""
    from localstack.model_repo import cpu_engine_args

    repository = stack.config.run_dir / "model_repository"
    lora_model = repository / "smollm2-lora"
    version = lora_model / "1"
    version.mkdir(parents=True, exist_ok=True)
    (lora_model / "config.pbtxt").write_text((repository / model_name / "config.pbtxt").read_text())
    engine = {**cpu_engine_args(stack.config.cache.default_model_dir), "enable_lora": True, "max_lora_rank": 8}
    (version / "model.json").write_text(json.dumps(engine))
    _write_adapter(version / "zero", 0.0)
    _write_adapter(version / "strong", 0.5)
    (version / "multi_lora.json").write_text(json.dumps({"zero": "zero", "strong": "strong"}))

    api = f"{stack.triton_http_url}/v2/repository/models"
    httpx.post(f"{api}/{model_name}/unload", timeout=120).raise_for_status()  # one engine at a time
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and stack.engine_processes():
        time.sleep(0.5)
    try:
        httpx.post(f"{api}/smollm2-lora/load", timeout=600).raise_for_status()

        def generate(**sampling: object) -> httpx.Response:
            body = {"text_input": "The capital of France is", "max_tokens": 8, "temperature": 0,
                    "exclude_input_in_output": True, **sampling}  # fmt: skip
            return httpx.post(f"{stack.triton_http_url}/v2/models/smollm2-lora/generate", json=body, timeout=120)

        base = generate().json()["text_output"]
        assert generate(lora_name="zero").json()["text_output"] == base
        assert generate(lora_name="strong").json()["text_output"] != base
        unknown = generate(lora_name="other")
        assert "LoRA other is not supported, we currently support ['zero', 'strong']" in unknown.text
    finally:
        httpx.post(f"{api}/smollm2-lora/unload", timeout=120)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and stack.engine_processes():
            time.sleep(0.5)
        shutil.rmtree(lora_model)  # out of the repository, so readiness looks at the served model only
        httpx.post(f"{api}/{model_name}/load", timeout=600).raise_for_status()
    with httpx.Client(base_url=stack.gateway_url, timeout=30) as client:
        _wait_status(client, 200, timeout_s=30)
