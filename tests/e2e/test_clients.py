"""Clients other than the OpenAI SDK, on the real stack: LiteLLM's Python client (chat, streamed chat, text
completion, async), each reading what the gateway itself answers to the same request, and vLLM's own serving
benchmark (`vllm bench serve`, as bench/ drives it) on both of its OpenAI backends."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from bench.prompts import Workload
from bench.vllm_bench import run_vllm_bench
from localstack.stack import LocalStack

# LiteLLM's own pydantic models warn as pydantic reads them; nothing the gateway sends causes it.
pytestmark = [
    pytest.mark.filterwarnings("ignore:Item .* is using the `ReadOnly` qualifier:UserWarning"),
    pytest.mark.filterwarnings("ignore:Accessing the 'model_:DeprecationWarning:litellm"),
]

CAPITAL_QUESTION = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
SAMPLING = {"temperature": 0, "max_tokens": 40}


# ---- LiteLLM ------------------------------------------------------------------------------------------------


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name, resolved by connect() itself
        return host == "localhost"


@pytest.fixture(scope="module")
def remote_connections() -> Iterator[list[Any]]:
    """Connections to anything but this machine, refused and recorded while the module runs: LiteLLM fetches its
    model cost map from GitHub unless told not to, and this machine reaches no site but package registries, so
    an attempt would only show as a slow fallback."""
    attempts: list[Any] = []
    connect = socket.socket.connect

    def loopback_only(sock: socket.socket, address: Any) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not is_loopback(address[0]):
            attempts.append(address)
            raise ConnectionRefusedError(f"test_clients: no connection beyond this machine ({address})")
        connect(sock, address)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket.socket, "connect", loopback_only)
        yield attempts


@pytest.fixture(scope="module")
def litellm(remote_connections: list[Any]) -> Iterator[ModuleType]:
    """LiteLLM imported offline (its bundled cost map, no catalog fetched); after the module, no connection
    beyond this machine may have been tried."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        patch.setenv("LITELLM_OFFLINE_MODE", "true")
        import litellm

        # It prints a "Provider List" banner whenever it looks up the cost of a model it does not know.
        patch.setattr(litellm, "suppress_debug_info", True)
        yield litellm
    assert remote_connections == []


@pytest.fixture(scope="module")
def route(base_url: str, model_name: str) -> dict[str, str]:
    """LiteLLM's arguments for the gateway: its `openai/` provider on our base URL."""
    return {"model": f"openai/{model_name}", "api_base": base_url, "api_key": "unused"}


def gateway_answer(base_url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """The gateway's own answer to the request a client made, so the client's reading is checked against it."""
    response = httpx.post(f"{base_url}{path}", json=body, timeout=120)
    response.raise_for_status()
    return response.json()


def assert_usage_is(usage: Any, expected: dict[str, int]) -> None:
    """The client reports the gateway's counts, not ones it estimated with a tokenizer of its own."""
    assert usage.prompt_tokens == expected["prompt_tokens"] > 0
    assert usage.completion_tokens == expected["completion_tokens"] > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


@pytest.fixture(scope="module")
def capital_answer(base_url: str, model_name: str) -> dict[str, Any]:
    body = {"model": model_name, "messages": CAPITAL_QUESTION, **SAMPLING}
    return gateway_answer(base_url, "/chat/completions", body)


def test_litellm_completion(litellm: ModuleType, route: dict[str, str], capital_answer: dict[str, Any]) -> None:
    reply = litellm.completion(messages=CAPITAL_QUESTION, **SAMPLING, **route)
    expected = capital_answer["choices"][0]
    assert "Paris" in reply.choices[0].message.content
    assert reply.choices[0].message.content == expected["message"]["content"]
    assert reply.choices[0].finish_reason == expected["finish_reason"] == "stop"
    assert_usage_is(reply.usage, capital_answer["usage"])


def test_litellm_streamed_completion(
    litellm: ModuleType, route: dict[str, str], capital_answer: dict[str, Any]
) -> None:
    stream = litellm.completion(
        messages=CAPITAL_QUESTION, stream=True, stream_options={"include_usage": True}, **SAMPLING, **route
    )
    chunks = list(stream)
    deltas = [chunk.choices[0].delta.content for chunk in chunks if chunk.choices and chunk.choices[0].delta.content]
    assert len(deltas) > 1  # streamed, not one block
    assert "".join(deltas) == capital_answer["choices"][0]["message"]["content"]
    finish_reasons = [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices]
    assert [reason for reason in finish_reasons if reason] == ["stop"]
    assert_usage_is(chunks[-1].usage, capital_answer["usage"])
    rebuilt = litellm.stream_chunk_builder(chunks, messages=CAPITAL_QUESTION)
    assert rebuilt.choices[0].message.content == "".join(deltas)
    assert_usage_is(rebuilt.usage, capital_answer["usage"])


def test_litellm_text_completion(
    litellm: ModuleType, route: dict[str, str], base_url: str, model_name: str
) -> None:
    """`text_completion` on the `openai/` provider calls /v1/completions: the prompt goes in without a chat
    template, so its token count is the completions endpoint's."""
    prompt = "The quick brown fox jumps over the lazy dog. Then"
    expected = gateway_answer(base_url, "/completions", {"model": model_name, "prompt": prompt, "max_tokens": 12,
                                                         "temperature": 0})  # fmt: skip
    reply = litellm.text_completion(prompt=prompt, max_tokens=12, temperature=0, **route)
    assert reply.choices[0].text.strip()
    assert reply.choices[0].text == expected["choices"][0]["text"]
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage.completion_tokens == 12
    assert_usage_is(reply.usage, expected["usage"])


async def test_litellm_acompletion(
    litellm: ModuleType, route: dict[str, str], capital_answer: dict[str, Any]
) -> None:
    expected = capital_answer["choices"][0]["message"]["content"]
    reply = await litellm.acompletion(messages=CAPITAL_QUESTION, **SAMPLING, **route)
    assert reply.choices[0].message.content == expected
    assert reply.choices[0].finish_reason == "stop"
    assert_usage_is(reply.usage, capital_answer["usage"])
    stream = await litellm.acompletion(
        messages=CAPITAL_QUESTION, stream=True, stream_options={"include_usage": True}, **SAMPLING, **route
    )
    chunks = [chunk async for chunk in stream]
    assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices) == expected
    assert_usage_is(chunks[-1].usage, capital_answer["usage"])


# ---- vllm bench serve ---------------------------------------------------------------------------------------

NUM_PROMPTS = 8
BENCH_WORKLOAD = {"input_len": 16, "output_len": 16}


@pytest.mark.parametrize("backend", ["openai", "openai-chat"])
def test_vllm_bench_serve(fast_stack: LocalStack, tmp_path: Path, backend: str) -> None:
    """vLLM's benchmark client reads the gateway's streams as it reads `vllm serve`'s: every request completes,
    with exactly the tokens asked for (`--ignore-eos`, counted from the stream's usage), and its timings."""
    workload = Workload(fast_stack.config.model_dir, **BENCH_WORKLOAD)
    result = run_vllm_bench(
        "gateway", fast_stack.gateway_url, fast_stack.config.model_name, backend, workload, concurrency=4,
        num_prompts=NUM_PROMPTS, warmups=0, result_dir=tmp_path, timeout_s=300, detailed=True,
    )  # fmt: skip
    assert result["completed"] == NUM_PROMPTS and result["failed"] == 0, result["errors"]
    assert result["output_lens"] == [workload.output_len] * NUM_PROMPTS
    assert result["total_output_tokens"] == NUM_PROMPTS * workload.output_len
    assert all(ttft > 0 for ttft in result["ttfts"])
    assert all(itls for itls in result["itls"])  # each stream came in more than one event
    assert result["p99_ttft_ms"] >= result["median_ttft_ms"] > 0
    # Events that left the gateway together arrive together: the median gap can be next to nothing.
    assert result["p99_itl_ms"] >= result["median_itl_ms"] >= 0 and result["mean_itl_ms"] > 0
