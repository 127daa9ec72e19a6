"""Streamed responses carrying several tokens each, end to end (issue 22).

The backend merges a request's outputs while its previous response is still on its way to Triton, so
under load a response carries several tokens. Which ones merge depends on timing; vLLM's
`stream_interval` engine argument merges deterministically (the first token alone, then every 4), so a
second copy of the fast model with `"stream_interval": 4` in its model.json gives every test here the
chunks a busy server sends: texts, token counts, logprobs and tool calls must all survive them.

The copy is written into the stack's model repository and loaded through Triton's model-load API (Triton
runs with explicit model control). A copy loaded with the API's file overrides would not appear in
Triton's repository index, which is where the gateway finds its models.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from localstack.model_repo import cpu_engine_args
from localstack.stack import LocalStack

INTERVAL = 4
TOKENS = 32
# The random model under a JSON schema would write whitespace forever: the copy's grammar allows none.
STRUCTURED = {"backend": "xgrammar", "disable_any_whitespace": True}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "enum": ["Paris", "Oslo", "Lima"]},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}


def _repository(stack: LocalStack) -> Path:
    return stack.config.model_repository or stack.config.run_dir / "model_repository"


@pytest.fixture(scope="module")
def interval_model(fast_stack: LocalStack) -> Iterator[str]:
    """The fast model again, its engine streaming every `INTERVAL` tokens; unloaded and removed at the end."""
    config = fast_stack.config
    name = f"{config.model_name}-interval{INTERVAL}"
    folder = _repository(fast_stack) / name
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text('backend: "vllm"\ninstance_group [ { count: 1, kind: KIND_MODEL } ]\n')
    engine_args = {
        **cpu_engine_args(config.model_dir, config.engine_memory_share),
        "stream_interval": INTERVAL,
        "structured_outputs_config": STRUCTURED,
    }
    (folder / "1" / "model.json").write_text(json.dumps(engine_args, indent=2) + "\n")
    with httpx.Client(base_url=fast_stack.triton_http_url, timeout=900) as triton:
        try:
            loaded = triton.post(f"/v2/repository/models/{name}/load")
            assert loaded.status_code == 200, loaded.text
            yield name
        finally:
            triton.post(f"/v2/repository/models/{name}/unload", json={"parameters": {"unload_dependents": True}})
            shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def gateway(fast_stack: LocalStack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"{fast_stack.gateway_url}/v1", timeout=300) as client:
        yield client


def _events(client: httpx.Client, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """A streamed request's SSE payloads, [DONE] left out."""
    events = []
    with client.stream("POST", path, json={**body, "stream": True, "stream_options": {"include_usage": True}}) as r:
        assert r.status_code == 200, r.read().decode()
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line[len("data: ") :]))
    assert events, "an empty stream"
    return events


def _choice_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [choice for event in events for choice in event["choices"]]


def _completion(model: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "prompt": "Tell me a story.", "max_tokens": TOKENS, "ignore_eos": True,
            "temperature": 0, **extra}  # fmt: skip


def test_responses_carry_several_tokens_and_the_text_and_usage_stay_whole(
    gateway: httpx.Client, interval_model: str
) -> None:
    events = _events(gateway, "/completions", _completion(interval_model))
    chunks = [choice for choice in _choice_events(events) if choice["text"]]
    streamed = "".join(choice["text"] for choice in chunks)
    assert events[-1]["usage"]["completion_tokens"] == TOKENS
    # The first token alone, then one response per INTERVAL tokens: far fewer chunks than tokens.
    assert 1 < len(chunks) <= 1 + -(-(TOKENS - 1) // INTERVAL)
    whole = gateway.post("/completions", json=_completion(interval_model)).json()
    assert whole["usage"]["completion_tokens"] == TOKENS
    assert streamed == whole["choices"][0]["text"]


def test_completion_logprobs_cover_every_token_of_merged_chunks(gateway: httpx.Client, interval_model: str) -> None:
    events = _events(gateway, "/completions", _completion(interval_model, logprobs=2))
    choices = _choice_events(events)
    tokens = [token for choice in choices if choice["logprobs"] for token in choice["logprobs"]["tokens"]]
    top = [entry for choice in choices if choice["logprobs"] for entry in choice["logprobs"]["top_logprobs"]]
    offsets = [offset for choice in choices if choice["logprobs"] for offset in choice["logprobs"]["text_offset"]]
    text = "".join(choice["text"] for choice in choices)
    assert len(tokens) == events[-1]["usage"]["completion_tokens"] == TOKENS
    assert "".join(tokens) == text
    assert all(1 <= len(entry) <= 2 for entry in top)
    assert offsets == [sum(len(t) for t in tokens[:i]) for i in range(len(tokens))]


def test_chat_logprobs_cover_every_token_of_merged_chunks(gateway: httpx.Client, interval_model: str) -> None:
    body = {"model": interval_model, "messages": [{"role": "user", "content": "Tell me a story."}],
            "max_tokens": TOKENS, "ignore_eos": True, "temperature": 0, "logprobs": True, "top_logprobs": 2}  # fmt: skip
    events = _events(gateway, "/chat/completions", body)
    choices = _choice_events(events)
    content = [entry for choice in choices if choice["logprobs"] for entry in choice["logprobs"]["content"]]
    text = "".join(choice["delta"].get("content") or "" for choice in choices)
    assert len(content) == events[-1]["usage"]["completion_tokens"] == TOKENS
    assert "".join(entry["token"] for entry in content) == text
    assert all(len(entry["top_logprobs"]) == 2 for entry in content)


@pytest.mark.parametrize(
    "tool_choice",
    [{"type": "function", "function": {"name": "get_weather"}}, "required"],
    ids=["named", "required"],
)
def test_streamed_tool_call_arguments_match_the_whole_response(
    gateway: httpx.Client, interval_model: str, tool_choice: Any
) -> None:
    """Constrained by the tools' JSON schema, even random weights write valid calls (vLLM issue #31501
    lost arguments exactly where chunks merged)."""
    body = {"model": interval_model, "messages": [{"role": "user", "content": "The weather in Paris?"}],
            "tools": [WEATHER], "tool_choice": tool_choice, "parallel_tool_calls": False, "temperature": 0,
            "seed": 22, "max_tokens": 200}  # fmt: skip
    whole = gateway.post("/chat/completions", json=body).json()
    [expected] = whole["choices"][0]["message"]["tool_calls"]
    assert whole["usage"]["completion_tokens"] > 1 + INTERVAL  # the stream below merged some responses
    choices = _choice_events(_events(gateway, "/chat/completions", body))
    calls = [call for choice in choices for call in choice["delta"].get("tool_calls") or []]
    assert [choice["finish_reason"] for choice in choices if choice["finish_reason"]] == ["tool_calls"]
    assert {call["function"].get("name") for call in calls} - {None} == {"get_weather"}
    arguments = "".join(call["function"].get("arguments") or "" for call in calls)
    assert json.loads(arguments) == json.loads(expected["function"]["arguments"])
    assert set(json.loads(arguments)) == {"city", "unit"}
