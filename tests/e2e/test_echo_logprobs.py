"""`/v1/completions` with `echo` and `logprobs` on the real stack: the prompt's logprobs come first, as vLLM's own
server gives them, streamed (with the first chunk) or not, and with `max_tokens` 0 (the prompt alone)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from localstack.stack import LocalStack

PROMPT = "The capital of France is"
TOP = 2


@pytest.fixture(scope="module")
def http(stack: LocalStack) -> httpx.Client:
    with httpx.Client(base_url=f"{stack.gateway_url}/v1", timeout=120) as client:
        yield client


def _body(model: str, **fields: Any) -> dict[str, Any]:
    return {"model": model, "prompt": PROMPT, "echo": True, "logprobs": TOP, "max_tokens": 4, "temperature": 0,
            "ignore_eos": True, **fields}  # fmt: skip


def _streamed(http: httpx.Client, body: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The stream's choices, in order, and its usage."""
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    with http.stream("POST", "/completions", json=body) as reply:
        assert reply.status_code == 200, reply.read()
        payloads = [line[len("data: ") :] for line in reply.iter_lines() if line.startswith("data: ")]
    assert payloads[-1] == "[DONE]"
    events = [json.loads(payload) for payload in payloads[:-1]]
    return [choice for event in events for choice in event["choices"]], events[-1]["usage"]


def _joined(choices: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """The logprobs of a stream's chunks as one."""
    keys = ("tokens", "token_logprobs", "top_logprobs", "text_offset")
    return {key: [item for choice in choices if choice["logprobs"] for item in choice["logprobs"][key]] for key in keys}


def _check(text: str, logprobs: dict[str, list[Any]], usage: dict[str, int], generated: int) -> None:
    """The prompt's tokens first (the first without a logprob), then the generated ones, offsets into `text`."""
    prompt_tokens = usage["prompt_tokens"]
    tokens = logprobs["tokens"]
    assert text.startswith(PROMPT)
    assert len(tokens) == prompt_tokens + generated
    assert "".join(tokens[:prompt_tokens]) == PROMPT
    assert "".join(tokens) == text
    assert logprobs["token_logprobs"][0] is None and logprobs["top_logprobs"][0] is None
    later = logprobs["token_logprobs"][1:]
    assert later and all(isinstance(value, float) and value <= 0 for value in later)
    for top in logprobs["top_logprobs"][1:]:
        assert TOP <= len(top) <= TOP + 1  # the top ones, and the chosen token when it is not among them
        assert all(value <= 0 for value in top.values())
    assert logprobs["text_offset"] == [sum(map(len, tokens[:i])) for i in range(len(tokens))]
    if generated:
        assert logprobs["text_offset"][prompt_tokens] == len(PROMPT)


def test_a_whole_response_lists_the_prompts_logprobs_first(http: httpx.Client, model_name: str) -> None:
    reply = http.post("/completions", json=_body(model_name))
    assert reply.status_code == 200, reply.text
    body = reply.json()
    [choice] = body["choices"]
    assert body["usage"]["completion_tokens"] == 4
    _check(choice["text"], choice["logprobs"], body["usage"], generated=4)


def test_a_stream_sends_the_prompts_logprobs_with_its_first_chunk(http: httpx.Client, model_name: str) -> None:
    choices, usage = _streamed(http, _body(model_name))
    first = choices[0]
    assert first["text"].startswith(PROMPT)
    assert len(first["logprobs"]["tokens"]) > usage["prompt_tokens"]  # the prompt's and the first generated token's
    _check("".join(choice["text"] for choice in choices), _joined(choices), usage, generated=4)
    whole = http.post("/completions", json=_body(model_name)).json()["choices"][0]
    assert _joined(choices)["tokens"] == whole["logprobs"]["tokens"]


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
def test_max_tokens_0_with_echo_returns_the_prompt_alone(http: httpx.Client, model_name: str, stream: bool) -> None:
    body = _body(model_name, max_tokens=0, n=2, temperature=1)
    if stream:
        choices, usage = _streamed(http, body)
    else:
        reply = http.post("/completions", json=body)
        assert reply.status_code == 200, reply.text
        choices, usage = reply.json()["choices"], reply.json()["usage"]
    assert usage["completion_tokens"] == 2  # the token each choice's engine run made, left out: vLLM counts it too
    for index in (0, 1):
        mine = [choice for choice in choices if choice["index"] == index]
        assert "".join(choice["text"] for choice in mine) == PROMPT
        assert mine[-1]["finish_reason"] == "length"
        _check(PROMPT, _joined(mine), usage, generated=0)


def test_several_prompts_each_echo_their_own(http: httpx.Client, model_name: str) -> None:
    other = "Once upon a time"
    body = http.post("/completions", json=_body(model_name, prompt=[PROMPT, other], max_tokens=2)).json()
    first, second = body["choices"]
    assert "".join(first["logprobs"]["tokens"][: len(first["logprobs"]["tokens"]) - 2]) == PROMPT
    assert "".join(second["logprobs"]["tokens"][: len(second["logprobs"]["tokens"]) - 2]) == other
    assert second["logprobs"]["token_logprobs"][0] is None and second["logprobs"]["text_offset"][0] == 0


def test_the_openai_client_reads_them(base_url: str, model_name: str) -> None:
    client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120)
    reply = client.completions.create(model=model_name, prompt=PROMPT, echo=True, logprobs=1, max_tokens=2)
    logprobs = reply.choices[0].logprobs
    assert logprobs.token_logprobs[0] is None and logprobs.top_logprobs[0] is None
    assert len(logprobs.tokens) == reply.usage.prompt_tokens + 2


@pytest.mark.parametrize(
    "fields, param",
    [({"max_tokens": 0, "echo": False}, "max_tokens"), ({"prompt": [1, 2, 3]}, "echo"), ({"logprobs": 21}, "logprobs")],
)
def test_what_vllm_refuses_gets_a_400(http: httpx.Client, model_name: str, fields: dict[str, Any], param: str) -> None:
    reply = http.post("/completions", json=_body(model_name, **fields))
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error" and param in (error["param"] or error["message"])
