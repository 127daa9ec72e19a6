"""Completions with `echo` and `logprobs`: the prompt's logprobs ahead of the generated tokens', as vLLM's server
gives them (first prompt token without a logprob, `text_offset` from the prompt's start), streamed or not."""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest
from tritonclient.grpc import service_pb2 as pb

from gateway.core.choices import ChoiceAccumulator
from gateway.core.coalesce import merge_chunks
from gateway.core.completions import CompletionRender, to_generate_requests
from gateway.core.triton_codec import decode_response, encode_request
from gateway.core.upstream import GenerateChunk
from gateway.errors import OpenAIError
from gateway.protocol import CompletionRequest

# The backend's prompt logprobs of "Hi there" (tokens "Hi", " there"), one alternative asked for.
PROMPT = json.dumps([
    {"4": {"logprob": None, "rank": None, "decoded_token": "Hi"}},
    {"9": {"logprob": -2.5, "rank": 3, "decoded_token": " there"}, "1": {"logprob": -0.5, "rank": 1,
                                                                          "decoded_token": ","}},
])  # fmt: skip


def _generated(token: str, logprob: float) -> str:
    return json.dumps([{"7": {"logprob": logprob, "rank": 1, "decoded_token": token}}])


def _request(**fields: Any) -> CompletionRequest:
    return CompletionRequest.model_validate({"model": "m", "prompt": "Hi there", "echo": True, "logprobs": 1, **fields})


def test_echo_with_logprobs_asks_for_the_prompts_with_as_many_alternatives() -> None:
    [upstream] = to_generate_requests(_request(), "m", "x")
    assert upstream.sampling["prompt_logprobs"] == upstream.sampling["logprobs"] == 1
    assert "prompt_logprobs" not in to_generate_requests(_request(echo=False), "m", "x")[0].sampling
    assert "prompt_logprobs" not in to_generate_requests(_request(logprobs=None), "m", "x")[0].sampling
    inputs = {t.name: raw for t, raw in zip(*(lambda m: (m.inputs, m.raw_input_contents))(encode_request(upstream)))}
    assert inputs["return_prompt_logprobs"] == b"\x01"
    plain = encode_request(to_generate_requests(_request(echo=False), "m", "x")[0])
    assert "return_prompt_logprobs" not in {t.name for t in plain.inputs}  # the stock backend's inputs only


def test_max_tokens_0_is_the_prompt_alone_with_echo_and_refused_without() -> None:
    [upstream] = to_generate_requests(_request(max_tokens=0), "m", "x")
    assert upstream.sampling["max_tokens"] == 1  # the engine generates at least one token: left out
    with pytest.raises(OpenAIError) as info:
        to_generate_requests(_request(max_tokens=0, echo=False), "m", "x")
    assert info.value.status == 400 and info.value.param == "max_tokens"
    with pytest.raises(ValueError):
        _request(max_tokens=-1)


def _bytes(value: str) -> bytes:
    return struct.pack("<I", len(value.encode())) + value.encode()


def test_the_prompt_logprobs_output_is_decoded_and_kept_when_responses_merge() -> None:
    response = pb.ModelInferResponse()
    for name, raw in (("text_output", _bytes("a")), ("prompt_logprobs", _bytes(PROMPT))):
        tensor = response.outputs.add()
        tensor.name, tensor.datatype = name, "BYTES"
        response.raw_output_contents.append(raw)
    first = decode_response(response)
    assert first.prompt_logprobs == PROMPT
    response.raw_output_contents[1] = _bytes("null")
    assert decode_response(response).prompt_logprobs is None
    merged = merge_chunks([first, GenerateChunk(["b"]), GenerateChunk(["c"], final=True)])
    assert merged.prompt_logprobs == PROMPT and merged.texts == ["abc"]


def _check_offsets(logprobs: dict[str, Any], text: str) -> None:
    assert "".join(logprobs["tokens"]) == text
    assert logprobs["text_offset"] == [sum(map(len, logprobs["tokens"][:i])) for i in range(len(logprobs["tokens"]))]


def test_a_stream_sends_the_prompts_logprobs_with_the_echo_then_the_tokens() -> None:
    render = CompletionRender(_request(stream=True), "c", 1)
    acc = ChoiceAccumulator(1, top_logprobs=1)
    first = GenerateChunk(["!"], ["None"], 2, [1], logprobs=[_generated("!", -0.25)], prompt_logprobs=PROMPT)
    second = GenerateChunk([" Yo"], ["length"], 2, [1], logprobs=[_generated(" Yo", -1.0)])
    [[one], [two]] = [render.chunks(d) for chunk in (first, second) for d in acc.add(chunk)]
    head, tail = one["choices"][0], two["choices"][0]
    assert head["text"] == "Hi there!" and tail["text"] == " Yo"
    assert head["logprobs"] == {
        "tokens": ["Hi", " there", "!"],
        "token_logprobs": [None, -2.5, -0.25],
        "top_logprobs": [None, {" there": -2.5, ",": -0.5}, {"!": -0.25}],  # the prompt token outside the top 1
        "text_offset": [0, 2, 8],
    }
    assert tail["logprobs"]["text_offset"] == [9]
    whole = {key: head["logprobs"][key] + tail["logprobs"][key] for key in head["logprobs"]}
    _check_offsets(whole, "Hi there! Yo")


def test_a_whole_response_lists_the_prompt_then_the_tokens_for_every_choice_of_every_prompt() -> None:
    render = CompletionRender(_request(prompt=["Hi there", "Hi there"], n=2), "c", 1)
    acc = ChoiceAccumulator(4, top_logprobs=1)
    for offset in (0, 2):
        generated = [_generated("!", -0.25), _generated("?", -0.75)]
        chunk = GenerateChunk(["!", "?"], ["length"] * 2, 2, [1, 1], True, logprobs=generated, prompt_logprobs=PROMPT)
        acc.add(chunk, offset=offset)
    choices = render.response(acc)["choices"]
    assert [c["text"] for c in choices] == ["Hi there!", "Hi there?"] * 2
    for choice in choices:
        logprobs = choice["logprobs"]
        assert logprobs["token_logprobs"][:2] == [None, -2.5] and logprobs["top_logprobs"][0] is None
        _check_offsets(logprobs, choice["text"])


def test_every_choice_of_a_stream_gets_the_echo_once_even_before_its_first_token() -> None:
    render = CompletionRender(_request(stream=True, n=2), "c", 1)
    acc = ChoiceAccumulator(2, top_logprobs=1)
    first = GenerateChunk(["!", ""], ["None", "None"], logprobs=[_generated("!", -0.25), "[]"], prompt_logprobs=PROMPT)
    later = GenerateChunk(["", "?"], ["length", "length"], logprobs=["[]", _generated("?", -0.75)])
    choices = [c for chunk in (first, later) for d in acc.add(chunk) for c in render.chunks(d)[0]["choices"]]
    second = [c for c in choices if c["index"] == 1]
    assert [c["text"] for c in second] == ["Hi there", "?"]
    assert second[0]["logprobs"]["tokens"] == ["Hi", " there"] and second[1]["logprobs"]["text_offset"] == [8]


@pytest.mark.parametrize("stream", [False, True])
def test_max_tokens_0_returns_the_prompt_and_its_logprobs_alone(stream: bool) -> None:
    render = CompletionRender(_request(max_tokens=0, stream=stream), "c", 1)
    acc = ChoiceAccumulator(1, top_logprobs=1)
    chunk = GenerateChunk(["!"], ["length"], 2, [1], True, logprobs=[_generated("!", -0.25)], prompt_logprobs=PROMPT)
    deltas = acc.add(chunk)
    choice = render.chunks(deltas[0])[0]["choices"][0] if stream else render.response(acc)["choices"][0]
    assert choice["text"] == "Hi there" and choice["finish_reason"] == "length"
    assert choice["logprobs"]["tokens"] == ["Hi", " there"] and choice["logprobs"]["text_offset"] == [0, 2]


def test_echo_without_logprobs_or_without_the_prompts_keeps_the_offsets_after_the_prompt() -> None:
    """A backend that does not return the prompt's logprobs: the generated tokens' offsets still count the prompt."""
    render = CompletionRender(_request(), "c", 1)
    acc = ChoiceAccumulator(1, top_logprobs=1)
    acc.add(GenerateChunk(["!"], ["length"], 2, [1], True, logprobs=[_generated("!", -0.25)]))
    logprobs = render.response(acc)["choices"][0]["logprobs"]
    assert logprobs["tokens"] == ["!"] and logprobs["text_offset"] == [8]
    plain = CompletionRender(_request(logprobs=None), "c", 1)
    acc = ChoiceAccumulator(1)
    acc.add(GenerateChunk(["!"], ["length"], 2, [1], True))
    assert plain.response(acc)["choices"][0] == {"index": 0, "text": "Hi there!", "logprobs": None,
                                                  "finish_reason": "length"}  # fmt: skip
