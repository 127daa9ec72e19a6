from __future__ import annotations

import pytest

from gateway.core.choices import ChoiceAccumulator
from gateway.core.completions import CompletionRender, to_generate_request
from gateway.core.upstream import GenerateChunk
from gateway.errors import OpenAIError
from gateway.protocol import CompletionRequest


def _request(**fields) -> CompletionRequest:
    return CompletionRequest.model_validate({"model": "m", "prompt": "Hello", **fields})


def test_sampling_fields_reach_the_backend_request() -> None:
    request = _request(max_tokens=7, temperature=0, top_p=0.5, stop="\n", seed=3, top_k=5, ignore_eos=True)
    upstream = to_generate_request(request, "m", "cmpl-1")
    assert upstream.text_input == "Hello"
    assert upstream.request_id == "cmpl-1"
    assert upstream.sampling == {
        "max_tokens": 7,
        "temperature": 0,
        "top_p": 0.5,
        "stop": ["\n"],
        "seed": 3,
        "top_k": 5,
        "ignore_eos": True,
        "n": 1,
    }


def test_openai_default_max_tokens_is_16() -> None:
    assert to_generate_request(_request(), "m", "x").sampling["max_tokens"] == 16


def test_single_item_prompt_list_is_accepted() -> None:
    assert to_generate_request(_request(prompt=["Hi"]), "m", "x").text_input == "Hi"


@pytest.mark.parametrize("fields, param", [({"suffix": "x"}, "suffix"), ({"best_of": 3}, "best_of")])
def test_unsupported_fields_are_rejected_clearly(fields: dict, param: str) -> None:
    with pytest.raises(OpenAIError) as info:
        to_generate_request(_request(**fields), "m", "x")
    assert info.value.status == 400 and info.value.param == param


def test_stream_chunks_then_usage() -> None:
    request = _request(stream=True, stream_options={"include_usage": True})
    render = CompletionRender(request, "cmpl-1", 123)
    acc = ChoiceAccumulator(1)
    chunks = []
    for piece in (
        GenerateChunk(["Hel"], ["None"], 2, [1]),
        GenerateChunk(["lo"], ["length"], 2, [1], final=True),
    ):
        chunks += [render.chunks(delta)[0] for delta in acc.add(piece)]
    assert [c["choices"][0]["text"] for c in chunks] == ["Hel", "lo"]
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, "length"]
    assert all(c["id"] == "cmpl-1" and c["created"] == 123 and c["usage"] is None for c in chunks)
    final = render.usage_chunk(acc)
    assert final["choices"] == []
    assert final["usage"] == {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4}


def test_non_streaming_response_shape() -> None:
    request = _request()
    render = CompletionRender(request, "cmpl-9", 5)
    acc = ChoiceAccumulator(1)
    acc.add(GenerateChunk([" world"], ["stop"], 1, [2], final=True))
    body = render.response(acc)
    assert body == {
        "id": "cmpl-9",
        "object": "text_completion",
        "created": 5,
        "model": "m",
        "choices": [{"index": 0, "text": " world", "logprobs": None, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
    }


def test_echo_prepends_the_prompt_once() -> None:
    request = _request(echo=True, stream=True)
    render = CompletionRender(request, "c", 1)
    acc = ChoiceAccumulator(1)
    texts = [render.chunks(d)[0]["choices"][0]["text"] for d in acc.add(GenerateChunk([" a"], ["None"], 1, [1]))]
    texts += [render.chunks(d)[0]["choices"][0]["text"] for d in acc.add(GenerateChunk([" b"], ["stop"], 1, [1]))]
    assert texts == ["Hello a", " b"]
