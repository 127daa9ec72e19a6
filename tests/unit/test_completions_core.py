from __future__ import annotations

import pytest

from gateway.core.choices import ChoiceAccumulator
from gateway.core.completions import CompletionRender, to_generate_requests
from gateway.core.upstream import GenerateChunk
from gateway.errors import OpenAIError
from gateway.protocol import CompletionRequest


def _request(**fields) -> CompletionRequest:
    return CompletionRequest.model_validate({"model": "m", "prompt": "Hello", **fields})


def test_sampling_fields_reach_the_backend_request() -> None:
    request = _request(max_tokens=7, temperature=0, top_p=0.5, stop="\n", seed=3, top_k=5, ignore_eos=True)
    [upstream] = to_generate_requests(request, "m", "cmpl-1")
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
    assert to_generate_requests(_request(), "m", "x")[0].sampling["max_tokens"] == 16


def test_every_prompt_form_gives_one_backend_request_per_prompt() -> None:
    [one] = to_generate_requests(_request(prompt=["Hi"]), "m", "x")
    assert one.text_input == "Hi" and one.request_id == "x"
    [ids] = to_generate_requests(_request(prompt=[1, 2, 3]), "m", "x")
    assert ids.prompt_token_ids == [1, 2, 3] and ids.text_input is None
    texts = to_generate_requests(_request(prompt=["a", "b"]), "m", "x")
    assert [r.text_input for r in texts] == ["a", "b"] and [r.request_id for r in texts] == ["x-0", "x-1"]
    nested = to_generate_requests(_request(prompt=[[1], [2, 3]]), "m", "x")
    assert [r.prompt_token_ids for r in nested] == [[1], [2, 3]]


def test_choices_of_several_prompts_are_numbered_prompt_by_prompt() -> None:
    request = _request(prompt=["a", "b"], n=2, echo=True)
    render = CompletionRender(request, "c", 1)
    acc = ChoiceAccumulator(4)
    acc.add(GenerateChunk(["1", "2"], ["stop", "stop"], 3, [1, 1]), offset=0)
    acc.add(GenerateChunk(["3", "4"], ["stop", "stop"], 5, [1, 1]), offset=2)
    body = render.response(acc)
    assert [c["text"] for c in body["choices"]] == ["a1", "a2", "b3", "b4"]
    assert body["usage"] == {"prompt_tokens": 8, "completion_tokens": 4, "total_tokens": 12}


def test_echo_with_token_prompts_is_refused() -> None:
    with pytest.raises(OpenAIError) as info:
        to_generate_requests(_request(prompt=[1, 2], echo=True), "m", "x")
    assert info.value.param == "echo"


@pytest.mark.parametrize("fields, param", [({"suffix": "x"}, "suffix"), ({"best_of": 3}, "best_of")])
def test_unsupported_fields_are_rejected_clearly(fields: dict, param: str) -> None:
    with pytest.raises(OpenAIError) as info:
        to_generate_requests(_request(**fields), "m", "x")
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


def test_token_counts_held_to_the_end_unless_usage_is_wanted_in_every_chunk() -> None:
    [plain] = to_generate_requests(_request(stream=True), "m", "x")
    assert plain.sparse_outputs
    continuous = _request(stream=True, stream_options={"include_usage": True, "continuous_usage_stats": True})
    [counted] = to_generate_requests(continuous, "m", "x")
    assert not counted.sparse_outputs


def test_a_token_without_text_keeps_its_logprob_position() -> None:
    """A token that decodes to no text yet (part of a multi-byte character) still has a logprob."""
    acc = ChoiceAccumulator(1, top_logprobs=0)
    entry = '[{"7": {"logprob": -0.5, "rank": 1, "decoded_token": ""}}]'
    [delta] = acc.add(GenerateChunk([""], ["None"], 1, [1], logprobs=[entry]))
    assert delta.text == "" and len(delta.logprobs) == 1
    assert len(acc.logprobs[0]) == 1
