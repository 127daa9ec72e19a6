"""Serving another model: the fast model chosen by name (`make up MODEL=tiny-random-llama`, the `fast_stack`
fixture) answers completions and chats through the gateway; `make up MODEL_REPOSITORY=...` (test_up_stop.py)
serves every model of a repository. And Ctrl-C while `make up` starts stops everything it had started."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import httpx

from localstack.model_choice import FAST_MODEL_MEMORY_SHARE
from localstack.model_repo import write_model_repository
from localstack.net import free_port
from localstack.paths import REPO_ROOT, CachePaths, default_cache_dir
from localstack.processes import Service, wait_until
from localstack.stack import LocalStack
from localstack.processes import stray_processes

# A Triton model named unlike any prepared model: what is served comes from the repository.
REPOSITORY_MODEL = "tiny-llama-from-a-repository"
STUB = "triton_python_backend_stub"  # the process Triton loads a Python-based backend's model in


def test_fast_model_completes_256_tokens_after_a_long_prompt(fast_stack: LocalStack) -> None:
    body = {
        "model": fast_stack.config.model_name,
        "prompt": " ".join(f"word{i}" for i in range(32)),
        "max_tokens": 256,
        "ignore_eos": True,
    }
    response = httpx.post(f"{fast_stack.gateway_url}/v1/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    usage = response.json()["usage"]
    assert usage["prompt_tokens"] >= 128 and usage["completion_tokens"] == 256
    assert response.json()["choices"][0]["finish_reason"] == "length"


def test_fast_model_chats_with_its_template(fast_stack: LocalStack) -> None:
    body = {
        "model": fast_stack.config.model_name,
        "messages": [{"role": "user", "content": "Hello!"}],
        "max_completion_tokens": 8,
        "temperature": 0,
    }
    response = httpx.post(f"{fast_stack.gateway_url}/v1/chat/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    # "<|user|>\nHello!</s>\n<|assistant|>\n" is more tokens than the message alone.
    assert response.json()["usage"]["prompt_tokens"] > 4
    assert response.json()["choices"][0]["message"]["role"] == "assistant"


def test_ctrl_c_during_the_start_stops_everything_it_started(tmp_path: Path) -> None:
    """The first start compiles for minutes: Ctrl-C then gives up on it, and leaves nothing running."""
    repository = write_model_repository(
        tmp_path / "repository", CachePaths(default_cache_dir()).fast_model_dir, REPOSITORY_MODEL,
        FAST_MODEL_MEMORY_SHARE,
    )  # fmt: skip
    run_dir = tmp_path / "up"
    argv = [
        sys.executable, "-m", "localstack.up", "--model-repository", str(repository), "--run-dir", str(run_dir),
        "--port", str(free_port()), "--http-port", str(free_port()), "--grpc-port", str(free_port()),
        "--metrics-port", str(free_port()),
    ]  # fmt: skip
    env = {**os.environ, "MODEL": ""}  # the repository alone, whatever the caller's shell holds
    up = Service("up", argv, env, run_dir / "up.out", cwd=REPO_ROOT)
    try:
        # Triton is loading the model: a backend stub of the run has started, nothing is ready yet.
        loading = lambda: any(STUB in line for line in stray_processes(run_dir))
        assert wait_until(loading, 120, 0.2, up), up.log_tail()
        up.process.send_signal(signal.SIGINT)
        assert up.process.wait(timeout=90) == 0, up.log_tail()
        assert "[up] stopped before it was ready." in up.log_tail()
        assert not stray_processes(run_dir)
    finally:
        up.stop()
