"""Every response and stream chunk the gateway produces validates against OpenAI's published spec;
other real clients work; malformed bodies never get a 5xx."""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from localstack.stack import LocalStack
from tests.openai_spec import validate, validate_completion_chunk

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                       "required": ["city"]},
    },
}  # fmt: skip

COMPLETION_CASES = [
    {"prompt": "Hello", "max_tokens": 5},
    {"prompt": ["Hello"], "max_tokens": 3, "n": 2, "temperature": 0.8, "seed": 1},
    {"prompt": "Count: 1, 2,", "max_tokens": 8, "stop": [","], "temperature": 0},
    {"prompt": "Hi", "max_tokens": 4, "logprobs": 2, "echo": True},
    {"prompt": "Hi", "max_tokens": 4, "top_k": 5, "min_p": 0.1, "repetition_penalty": 1.1, "ignore_eos": True},
    {"prompt": [[1, 2, 3], [4, 5]], "max_tokens": 3, "min_tokens": 2, "stop_token_ids": [2], "user": "u"},
]
CHAT_CASES = [
    {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5},
    {"messages": [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": [{"type": "text",
     "text": "Hi"}]}], "max_completion_tokens": 4, "n": 2},  # fmt: skip
    {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "logprobs": True, "top_logprobs": 2},
    {"messages": [{"role": "user", "content": "Weather in Oslo?"}], "tools": [WEATHER_TOOL], "tool_choice": "required",
     "max_tokens": 40},  # fmt: skip
    {"messages": [{"role": "user", "content": "Weather in Oslo?"}], "tools": [WEATHER_TOOL], "max_tokens": 10},
    {"messages": [{"role": "user", "content": "A JSON object please"}], "response_format": {"type": "json_object"},
     "max_tokens": 20},  # fmt: skip
]


@pytest.fixture(scope="module")
def http(stack: LocalStack) -> httpx.Client:
    with httpx.Client(base_url=stack.gateway_url, timeout=120) as client:
        yield client


def _events(response: httpx.Response) -> list[dict]:
    payloads = [line[len("data: ") :] for line in response.iter_lines() if line.startswith("data: ")]
    assert payloads[-1] == "[DONE]"
    return [json.loads(p) for p in payloads[:-1]]


@pytest.mark.parametrize("case", COMPLETION_CASES)
@pytest.mark.parametrize("stream", [False, True])
def test_completions_conform(http: httpx.Client, model_name: str, case: dict, stream: bool) -> None:
    body = {"model": model_name, **case, "stream": stream}
    if not stream:
        response = http.post("/v1/completions", json=body)
        assert response.status_code == 200, response.text
        validate("CreateCompletionResponse", response.json())
        return
    body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    with http.stream("POST", "/v1/completions", json=body) as response:
        assert response.status_code == 200
        chunks = _events(response)
    for chunk in chunks:
        validate_completion_chunk(chunk)
    counts = [c["usage"]["completion_tokens"] for c in chunks]
    assert counts == sorted(counts)  # usage so far, in every chunk
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0


@pytest.mark.parametrize("case", CHAT_CASES)
@pytest.mark.parametrize("stream", [False, True])
def test_chat_conforms(http: httpx.Client, model_name: str, case: dict, stream: bool) -> None:
    body = {"model": model_name, **case, "stream": stream}
    if not stream:
        response = http.post("/v1/chat/completions", json=body)
        assert response.status_code == 200, response.text
        validate("CreateChatCompletionResponse", response.json())
        return
    body["stream_options"] = {"include_usage": True}
    with http.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        chunks = _events(response)
    for chunk in chunks:
        validate("CreateChatCompletionStreamResponse", chunk)
    assert len({c["id"] for c in chunks}) == 1 and chunks[0]["id"].startswith("chatcmpl-")


def test_models_and_errors_conform(http: httpx.Client, model_name: str) -> None:
    validate("ListModelsResponse", http.get("/v1/models").json())
    validate("Model", http.get(f"/v1/models/{model_name}").json())
    for response in (
        http.post("/v1/completions", json={"model": "nope", "prompt": "x"}),
        http.post("/v1/completions", json={"model": model_name}),
        http.post("/v1/chat/completions", content=b"[", headers={"content-type": "application/json"}),
    ):
        assert response.status_code in (400, 404)
        validate("ErrorResponse", response.json())


def test_langchain_chat_openai(base_url: str, model_name: str) -> None:
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(base_url=base_url, api_key="unused", model=model_name, temperature=0, max_tokens=40)
    answer = llm.invoke("What is the capital of France? Answer in one sentence.")
    assert "Paris" in answer.content
    streamed = "".join(chunk.content for chunk in llm.stream("What is the capital of France? Answer in one sentence."))
    assert streamed == answer.content


# ---- malformed and extreme bodies -------------------------------------------------------------------------

_JSON_LEAF = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False), st.text(max_size=30),
)  # fmt: skip
_JSON = st.recursive(_JSON_LEAF, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8),
                     inner, max_size=4), max_leaves=10)  # fmt: skip
_FIELDS = ["prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n", "stop", "seed",
           "stream", "stream_options", "logprobs", "top_logprobs", "echo", "presence_penalty", "frequency_penalty",
           "top_k", "min_p", "repetition_penalty", "min_tokens", "ignore_eos", "stop_token_ids", "tools",
           "tool_choice", "response_format", "suffix", "best_of", "user", "chat_template_kwargs"]  # fmt: skip


@st.composite
def _bodies(draw: st.DrawFn, model: str) -> dict:
    body = draw(st.dictionaries(st.sampled_from(_FIELDS), _JSON, max_size=6))
    body["model"] = draw(st.sampled_from([model, model, "", "other"]) | st.text(max_size=5))
    # Keep the valid ones cheap: a tiny generation, never a stream left open.
    body["max_tokens"] = draw(st.sampled_from([1, 2, 0, -1, "3", None, 10**12]))
    body["stream"] = False
    return body


# On the fast model, whose valid generations cost next to nothing (1500 examples on SmolLM2 took 136 s in a loaded
# full run); test_fuzz.py draws from the whole OpenAPI document besides, and `make fuzz` 5,000 times.
@settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_no_body_gets_a_server_error(fast_stack: LocalStack, data: st.DataObject) -> None:
    path = data.draw(st.sampled_from(["/v1/completions", "/v1/chat/completions"]))
    body = data.draw(_bodies(fast_stack.config.model_name))
    # json.dumps writes Infinity and NaN as such: extreme, not quite JSON, and must still be a 400.
    content = json.dumps(body).encode()
    response = httpx.post(f"{fast_stack.gateway_url}{path}", content=content, timeout=60,
                          headers={"content-type": "application/json"})  # fmt: skip
    assert response.status_code < 500, (body, response.text)
    if response.status_code != 200:
        assert set(response.json()["error"]) == {"message", "type", "param", "code"}
