"""The official OpenAI SDK, sync and async, against the gateway on the real local stack."""

from __future__ import annotations

import openai
import pytest
from transformers import AutoTokenizer

from localstack.stack import LocalStack

CAPITAL_QUESTION = "What is the capital of France? Answer in one sentence."


@pytest.fixture(scope="module")
def client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def async_client(base_url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def tokenizer(stack: LocalStack):
    return AutoTokenizer.from_pretrained(stack.config.cache.default_model_dir)


def test_chat_answers_paris(client: openai.OpenAI, model_name: str) -> None:
    reply = client.chat.completions.create(
        model=model_name, messages=[{"role": "user", "content": CAPITAL_QUESTION}], temperature=0, max_tokens=40
    )
    assert reply.object == "chat.completion"
    assert reply.id.startswith("chatcmpl-")
    assert reply.choices[0].message.role == "assistant"
    assert "Paris" in reply.choices[0].message.content
    assert reply.choices[0].finish_reason == "stop"


def test_chat_streamed_equals_non_streamed(client: openai.OpenAI, model_name: str) -> None:
    kwargs = dict(model=model_name, messages=[{"role": "user", "content": "Name three colors."}], temperature=0)
    full = client.chat.completions.create(max_tokens=30, **kwargs)
    chunks = list(
        client.chat.completions.create(max_tokens=30, stream=True, stream_options={"include_usage": True}, **kwargs)
    )
    content_chunks = [c for c in chunks if c.choices]
    assert content_chunks[0].choices[0].delta.role == "assistant"
    assert content_chunks[0].choices[0].delta.content  # the role arrives with the first text
    streamed = "".join(c.choices[0].delta.content or "" for c in content_chunks)
    assert streamed == full.choices[0].message.content
    assert content_chunks[-1].choices[0].finish_reason == full.choices[0].finish_reason
    assert len({c.id for c in chunks}) == 1 and len({c.created for c in chunks}) == 1
    assert chunks[-1].choices == [] and chunks[-1].usage == full.usage


def test_completion_stops_at_max_tokens_with_exact_usage(client: openai.OpenAI, model_name: str, tokenizer) -> None:
    prompt = "The quick brown fox jumps over the lazy dog. Then"
    reply = client.completions.create(model=model_name, prompt=prompt, max_tokens=12, temperature=0)
    assert reply.object == "text_completion" and reply.id.startswith("cmpl-")
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage.completion_tokens == 12
    assert reply.usage.prompt_tokens == len(tokenizer(prompt)["input_ids"])
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + 12


def test_completion_streamed_equals_non_streamed(client: openai.OpenAI, model_name: str) -> None:
    kwargs = dict(model=model_name, prompt="Once upon a time", max_tokens=24, temperature=0)
    full = client.completions.create(**kwargs)
    chunks = list(client.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs))
    streamed = "".join(c.choices[0].text for c in chunks if c.choices)
    assert streamed == full.choices[0].text
    assert chunks[-1].usage.completion_tokens == full.usage.completion_tokens == 24
    # One streamed chunk per generated token here: the usage agrees with what was received.
    assert sum(1 for c in chunks if c.choices and c.choices[0].text) <= 24


def test_stop_sequence_ends_the_text_and_is_not_included(client: openai.OpenAI, model_name: str) -> None:
    kwargs = dict(model=model_name, prompt="Count: 1, 2, 3, 4, 5, 6,", max_tokens=30, temperature=0)
    free = client.completions.create(**kwargs).choices[0].text
    stop = free.strip().split(",")[1].strip()  # a token the model really produces
    stopped = client.completions.create(stop=[stop], **kwargs).choices[0]
    assert stopped.finish_reason == "stop"
    assert stop not in stopped.text
    assert free.startswith(stopped.text)


def test_seed_makes_sampling_repeatable(client: openai.OpenAI, model_name: str) -> None:
    kwargs = dict(model=model_name, prompt="My favourite animal is", max_tokens=16, temperature=1.0, top_p=0.9)
    first = client.completions.create(seed=1234, **kwargs).choices[0].text
    second = client.completions.create(seed=1234, **kwargs).choices[0].text
    assert first == second


async def test_async_chat_and_completion(async_client: openai.AsyncOpenAI, model_name: str) -> None:
    chat = await async_client.chat.completions.create(
        model=model_name, messages=[{"role": "user", "content": CAPITAL_QUESTION}], temperature=0, max_tokens=40
    )
    assert "Paris" in chat.choices[0].message.content
    stream = await async_client.completions.create(
        model=model_name, prompt="Hello, my name is", max_tokens=8, temperature=0, stream=True
    )
    texts = [chunk.choices[0].text async for chunk in stream]
    full = await async_client.completions.create(model=model_name, prompt="Hello, my name is", max_tokens=8, temperature=0)
    assert "".join(texts) == full.choices[0].text


async def test_async_chat_stream(async_client: openai.AsyncOpenAI, model_name: str) -> None:
    stream = await async_client.chat.completions.create(
        model=model_name,
        messages=[{"role": "user", "content": CAPITAL_QUESTION}],
        temperature=0,
        max_tokens=40,
        stream=True,
    )
    text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream])
    assert "Paris" in text


def test_models_list_and_aliases(client: openai.OpenAI, model_name: str) -> None:
    assert sorted(m.id for m in client.models.list().data) == sorted([model_name, "smollm2"])
    assert client.models.retrieve(model_name).id == model_name
    reply = client.completions.create(model="smollm2", prompt="Hi", max_tokens=2)
    assert reply.model == "smollm2" and reply.usage.completion_tokens == 2
