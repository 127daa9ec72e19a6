"""At GPU token rates nothing fails: 256 concurrent streams on the fast model all complete.

The fast model (a tiny random-weight Llama, vLLM's real CPU engine) produces tokens faster than the
path carries them, so every stage runs saturated. Under this load requests used to fail with 504s when
each looked its model up in Triton's repository index; the model map now answers from memory.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from localstack.stack import LocalStack

STREAMS = 256
TOKENS = 128


async def _stream(client: httpx.AsyncClient, model: str, index: int) -> tuple[int, str, int]:
    """One streamed completion: its status, its text and the completion tokens its usage reports."""
    body = {
        "model": model,
        "prompt": f"Request {index}: tell me everything.",
        "max_tokens": TOKENS,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if index % 2:  # half of them through chat
        body["messages"] = [{"role": "user", "content": body.pop("prompt")}]
    path = "/v1/chat/completions" if index % 2 else "/v1/completions"
    text, completion_tokens = [], -1
    async with client.stream("POST", path, json=body) as response:
        if response.status_code != 200:
            return response.status_code, (await response.aread()).decode(), -1
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[len("data: ") :])
            assert "error" not in event, event
            for choice in event.get("choices", []):
                text.append(choice.get("text") or (choice.get("delta") or {}).get("content") or "")
            if event.get("usage"):
                completion_tokens = event["usage"]["completion_tokens"]
    return 200, "".join(text), completion_tokens


@pytest.mark.timeout(600)
async def test_256_streams_on_the_fast_model_all_complete(fast_stack: LocalStack) -> None:
    limits = httpx.Limits(max_connections=STREAMS, max_keepalive_connections=STREAMS)
    async with httpx.AsyncClient(base_url=fast_stack.gateway_url, timeout=300, limits=limits) as client:
        results = await asyncio.gather(
            *(_stream(client, fast_stack.config.model_name, i) for i in range(STREAMS)), return_exceptions=True
        )
    failures = [r for r in results if isinstance(r, BaseException) or r[0] != 200 or r[2] != TOKENS]
    assert not failures, f"{len(failures)} of {STREAMS} failed, e.g. {failures[:3]}"
    assert all(text for _, text, _ in results)
