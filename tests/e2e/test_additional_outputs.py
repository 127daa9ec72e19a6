"""The backend's additional outputs, every combination of the `return_*` flags, streamed or not, with and without
`logprobs`, through Triton's own HTTP API on the fast stack: the contract Triton's CI checks for the stock backend
(`L0_additional_outputs_vllm`), with real values (a cumulative logprob is the sum of the sampled tokens')."""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

import httpx
import pytest

from localstack.stack import LocalStack

FLAGS = ("return_finish_reason", "return_cumulative_logprob", "return_logprobs", "return_num_input_tokens",
         "return_num_output_tokens")  # fmt: skip
OUTPUT_OF = {flag: flag.removeprefix("return_") for flag in FLAGS}
TOKENS = 4


def _combinations() -> list[tuple[str, ...]]:
    return [combo for size in range(len(FLAGS) + 1) for combo in itertools.combinations(FLAGS, size)]


def _responses(http: httpx.Client, model: str, body: dict[str, Any], stream: bool) -> list[dict[str, Any]]:
    if not stream:
        reply = http.post(f"/v2/models/{model}/generate", json=body)
        assert reply.status_code == 200, reply.text
        return [reply.json()]
    events = []
    with http.stream("POST", f"/v2/models/{model}/generate_stream", json={**body, "stream": True}) as reply:
        assert reply.status_code == 200
        for line in reply.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    return events


def _sampled_logprobs(entry: str) -> list[float]:
    """The sampled token's logprob at each position: the backend lists it first."""
    return [next(iter(position.values()))["logprob"] for position in json.loads(entry)]


def _check(events: list[dict[str, Any]], asked: tuple[str, ...], logprobs: int | None, stream: bool) -> None:
    wanted = {OUTPUT_OF[flag] for flag in asked}
    for event in events:  # exactly what was asked for, in every response
        outputs = set(event) - {"model_name", "model_version", "text_output"}
        assert outputs == wanted, (asked, event)
    last = events[-1]
    if "finish_reason" in wanted:
        assert [e["finish_reason"] for e in events] == ["None"] * (len(events) - 1) + ["length"]
    if "num_output_tokens" in wanted:
        assert sum(e["num_output_tokens"] for e in events) == TOKENS
    if "num_input_tokens" in wanted:
        assert len({e["num_input_tokens"] for e in events}) == 1 and last["num_input_tokens"] > 0
    sampled: list[float] = []
    if "logprobs" in wanted:
        if logprobs is None:
            assert all(e["logprobs"] == "null" for e in events)  # not asked of the engine: nothing to return
        else:
            for event in events:
                for position in json.loads(event["logprobs"]):
                    assert 1 <= len(position) <= logprobs + 1
            sampled = [value for e in events for value in _sampled_logprobs(e["logprobs"])]
            assert len(sampled) == TOKENS
    if "cumulative_logprob" in wanted:
        cumulative = last["cumulative_logprob"]
        assert cumulative < 0 and math.isfinite(cumulative), (asked, logprobs, stream, cumulative)  # real, not 0.0
        if sampled:
            assert cumulative == pytest.approx(sum(sampled), abs=1e-3)
        if stream:  # it grows, response by response
            values = [e["cumulative_logprob"] for e in events]
            assert values == sorted(values, reverse=True)


@pytest.mark.parametrize("logprobs", [None, 2], ids=["no-logprobs", "logprobs-2"])
@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
def test_every_combination_of_additional_outputs(fast_stack: LocalStack, stream: bool, logprobs: int | None) -> None:
    model = fast_stack.config.model_name
    with httpx.Client(base_url=fast_stack.triton_http_url, timeout=60) as http:
        for asked in _combinations():
            body: dict[str, Any] = {"text_input": "Once upon a time", "max_tokens": TOKENS, "ignore_eos": True,
                                    "temperature": 0, "exclude_input_in_output": True,
                                    **{flag: True for flag in asked}}  # fmt: skip
            if logprobs is not None:
                body["logprobs"] = logprobs
            _check(_responses(http, model, body, stream), asked, logprobs, stream)


def _prompt_entries(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The prompt's logprobs: in the first response only, "null" in the others."""
    assert all("prompt_logprobs" in event for event in events)
    assert all(event["prompt_logprobs"] == "null" for event in events[1:])
    return json.loads(events[0]["prompt_logprobs"])


@pytest.mark.parametrize("prompt_logprobs", [None, 2], ids=["implied", "top-2"])
@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
def test_prompt_logprobs_come_once_with_every_prompt_token(
    fast_stack: LocalStack, stream: bool, prompt_logprobs: int | None
) -> None:
    """Ours: `return_prompt_logprobs`. (The local stack runs without prefix caching; that vLLM skips its cache for
    these requests is checked in tests/backend/test_sampling.py.)"""
    model = fast_stack.config.model_name
    prompt = "Once upon a time, in a land far away"
    body: dict[str, Any] = {"text_input": prompt, "max_tokens": TOKENS, "ignore_eos": True, "temperature": 0,
                            "exclude_input_in_output": True, "return_prompt_logprobs": True,
                            "return_num_input_tokens": True}  # fmt: skip
    if prompt_logprobs is not None:
        body["prompt_logprobs"] = prompt_logprobs
    with httpx.Client(base_url=fast_stack.triton_http_url, timeout=60) as http:
        events = _responses(http, model, body, stream)
        entries = _prompt_entries(events)
        assert len(entries) == events[-1]["num_input_tokens"]
        own = [next(iter(entry.values())) for entry in entries]  # the prompt's own token comes first
        assert "".join(token["decoded_token"] for token in own) == prompt
        assert own[0]["logprob"] is None and own[0]["rank"] is None  # nothing precedes the first token
        assert all(token["logprob"] <= 0 and token["rank"] >= 1 for token in own[1:])
        most = 1 if prompt_logprobs is None else prompt_logprobs + 1
        assert all(1 <= len(entry) <= most for entry in entries[1:])
        if prompt_logprobs is not None:  # the top ones are there, whatever the prompt's own rank
            assert all(len(entry) >= prompt_logprobs for entry in entries[1:])
        # Asked in the sampling parameters alone, as the stock backend would pass them: computed, not returned.
        plain = _responses(http, model, {**body, "return_prompt_logprobs": False, "prompt_logprobs": 1}, stream)
        assert all("prompt_logprobs" not in event for event in plain)
