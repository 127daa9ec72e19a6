"""OpenAI features beyond the basics: n, structured outputs, tools, client disconnects."""

from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest

from localstack.stack import LocalStack
from tests.engine_counts import assert_generation_stopped
from tests.metrics_text import sample_value


@pytest.fixture(scope="module")
def client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120)


def test_n_returns_that_many_choices(client: openai.OpenAI, model_name: str) -> None:
    reply = client.completions.create(model=model_name, prompt="A colour:", max_tokens=5, n=3, temperature=1, seed=7)
    assert sorted(c.index for c in reply.choices) == [0, 1, 2]
    assert all(c.finish_reason == "length" for c in reply.choices)
    assert reply.usage.completion_tokens == 15
    chunks = list(
        client.chat.completions.create(
            model=model_name, messages=[{"role": "user", "content": "Hi"}], max_tokens=4, n=3, stream=True
        )
    )
    texts = {i: "" for i in range(3)}
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
    assert all(texts.values())


def test_max_tokens_5_finishes_with_length(client: openai.OpenAI, model_name: str) -> None:
    reply = client.chat.completions.create(
        model=model_name, messages=[{"role": "user", "content": "Write a long poem."}], max_tokens=5
    )
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage.completion_tokens == 5


PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


def test_response_format_json_schema(client: openai.OpenAI, model_name: str) -> None:
    reply = client.chat.completions.create(
        model=model_name,
        messages=[{"role": "user", "content": "Invent a person. Reply in JSON with name and age."}],
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}},
        max_tokens=60,
        temperature=0,
    )
    jsonschema.validate(json.loads(reply.choices[0].message.content), PERSON)


def test_response_format_json_object(client: openai.OpenAI, model_name: str) -> None:
    reply = client.chat.completions.create(
        model=model_name,
        messages=[{"role": "user", "content": "Give me a JSON object about Paris."}],
        response_format={"type": "json_object"},
        max_tokens=80,
        temperature=0,
    )
    if reply.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(reply.choices[0].message.content), dict)


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 30}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


@pytest.mark.parametrize("stream", [False, True])
def test_tool_choice_required_returns_parseable_tool_calls(client: openai.OpenAI, model_name: str, stream: bool) -> None:
    kwargs = dict(
        model=model_name,
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[WEATHER_TOOL],
        tool_choice="required",
        max_tokens=60,
        temperature=0,
    )
    if stream:
        chunks = list(client.chat.completions.create(stream=True, **kwargs))
        calls = [call for c in chunks if c.choices for call in (c.choices[0].delta.tool_calls or [])]
        finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    else:
        reply = client.chat.completions.create(**kwargs)
        calls = reply.choices[0].message.tool_calls
        finish = [reply.choices[0].finish_reason]
    assert finish == ["tool_calls"]
    assert calls and calls[0].function.name == "get_weather"
    assert calls[0].id.startswith("call_")
    arguments = json.loads(calls[0].function.arguments)
    jsonschema.validate(arguments, WEATHER_TOOL["function"]["parameters"])


def test_named_tool_choice(client: openai.OpenAI, model_name: str) -> None:
    reply = client.chat.completions.create(
        model=model_name,
        messages=[{"role": "user", "content": "Weather in Rome please."}],
        tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=60,
        temperature=0,
    )
    [call] = reply.choices[0].message.tool_calls
    assert call.function.name == "get_weather"
    assert "city" in json.loads(call.function.arguments)


def test_unknown_named_tool_is_a_400(stack: LocalStack, model_name: str) -> None:
    body = {
        "model": model_name,
        "messages": [{"role": "user", "content": "x"}],
        "tools": [WEATHER_TOOL],
        "tool_choice": {"type": "function", "function": {"name": "nope"}},
    }
    response = httpx.post(f"{stack.gateway_url}/v1/chat/completions", json=body, timeout=30)
    assert response.status_code == 400 and response.json()["error"]["param"] == "tool_choice"


@pytest.mark.parametrize("stream", [True, False])
def test_client_disconnect_stops_the_generation(stack: LocalStack, model_name: str, stream: bool) -> None:
    body = {"model": model_name, "prompt": "Tell a very long story.", "max_tokens": 1500, "ignore_eos": True,
            "stream": stream}  # fmt: skip
    url = f"{stack.gateway_url}/v1/completions"
    if stream:
        with httpx.stream("POST", url, json=body, timeout=30) as response:
            lines = response.iter_lines()
            assert next(lines).startswith("data: ")
    else:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(url, json=body, timeout=1.5)
    # The cancel travels gateway -> Triton -> engine; the backend asks Triton twice a second.
    assert_generation_stopped(stack.triton_metrics_url, model_name)
    text = httpx.get(f"{stack.gateway_url}/metrics", timeout=5).text
    assert sample_value(text, "gateway_requests_in_flight", model=model_name, endpoint="completions") == 0
    assert sample_value(text, "gateway_client_disconnects_total", model=model_name, endpoint="completions") >= 1
    assert sample_value(text, "vllm:num_requests_running", model=model_name) == 0


def test_several_prompts_and_token_prompts(client: openai.OpenAI, model_name: str) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(_model_dir()))
    prompts = ["The sky is", "Grass is"]
    counts = [len(tokenizer(p)["input_ids"]) for p in prompts]
    # Prompts of one request run side by side in one batch, where greedy outputs may differ in the last bits
    # from a batch of one: the checks are on structure and exact usage, not on text equality across requests.
    several = client.completions.create(model=model_name, prompt=prompts, max_tokens=4, temperature=0)
    assert [c.index for c in several.choices] == [0, 1]
    assert all(c.text and c.finish_reason == "length" for c in several.choices)
    assert several.usage.prompt_tokens == sum(counts) and several.usage.completion_tokens == 8
    sampled = client.completions.create(model=model_name, prompt=["a", "b"], max_tokens=2, n=2, temperature=1)
    assert [c.index for c in sampled.choices] == [0, 1, 2, 3] and sampled.usage.completion_tokens == 8
    # Token ids give the same answer as the text they encode (one request at a time).
    single = client.completions.create(model=model_name, prompt=prompts[0], max_tokens=4, temperature=0)
    tokens = tokenizer(prompts[0])["input_ids"]
    by_ids = client.completions.create(model=model_name, prompt=tokens, max_tokens=4, temperature=0)
    assert by_ids.choices[0].text == single.choices[0].text
    assert by_ids.usage.prompt_tokens == single.usage.prompt_tokens == counts[0]
    nested = client.completions.create(model=model_name, prompt=[tokens, tokens[:2]], max_tokens=4, temperature=0,
                                       stream=True, stream_options={"include_usage": True})  # fmt: skip
    texts = {0: "", 1: ""}
    chunks = list(nested)
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] += choice.text
    assert all(texts.values())
    assert chunks[-1].usage.prompt_tokens == counts[0] + 2 and chunks[-1].usage.completion_tokens == 8


def _model_dir():
    from localstack.paths import CachePaths, default_cache_dir

    return CachePaths(default_cache_dir()).default_model_dir
