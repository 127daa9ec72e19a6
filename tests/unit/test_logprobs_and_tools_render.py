from __future__ import annotations

import json

from gateway.core.chat import ChatRender, to_generate_request
from gateway.core.choices import ChoiceAccumulator
from gateway.core.completions import CompletionRender
from gateway.core.completions import to_generate_requests
from gateway.core.logprobs import completion_logprobs, parse_positions
from gateway.core.upstream import GenerateChunk
from gateway.protocol import ChatCompletionRequest, CompletionRequest


def _lp(*entries: tuple[str, float, int, str]) -> str:
    return json.dumps([{tid: {"logprob": lp, "rank": rank, "decoded_token": tok} for tid, lp, rank, tok in entries}])


def test_sampled_token_first_and_top_k_by_rank() -> None:
    raw = _lp(("5", -2.0, 3, " c"), ("1", -0.1, 1, " a"), ("2", -1.0, 2, " b"))
    [position] = parse_positions(raw, top_k=2)
    assert position.sampled.token == " c" and position.sampled.rank == 3
    assert [t.token for t in position.top] == [" a", " b"]


def test_completion_top_logprobs_add_the_sampled_token_when_it_is_not_among_the_top() -> None:
    """OpenAI's legacy format (and vLLM's server): up to `logprobs` + 1 entries, the sampled token's always there."""
    raw = _lp(("5", -2.0, 3, " c"), ("1", -0.1, 1, " a"), ("2", -1.0, 2, " b"))
    [outside] = completion_logprobs(parse_positions(raw, top_k=2), 0)["top_logprobs"]
    assert outside == {" c": -2.0, " a": -0.1, " b": -1.0}
    [inside] = completion_logprobs(parse_positions(_lp(("1", -0.1, 1, " a"), ("2", -1.0, 2, " b")), top_k=2), 0)[
        "top_logprobs"
    ]
    assert inside == {" a": -0.1, " b": -1.0}


def test_completion_logprobs_with_offsets_in_a_stream() -> None:
    request = CompletionRequest.model_validate({"model": "m", "prompt": "P", "logprobs": 1, "stream": True})
    assert to_generate_requests(request, "m", "r")[0].sampling["logprobs"] == 1
    render = CompletionRender(request, "c", 1)
    acc = ChoiceAccumulator(1, top_logprobs=1)
    first = GenerateChunk([" a"], ["None"], 1, [1], logprobs=[_lp(("1", -0.5, 1, " a"))])
    second = GenerateChunk([" b"], ["length"], 1, [1], logprobs=[_lp(("2", -0.25, 1, " b"))])
    chunks = [render.chunks(d)[0] for chunk in (first, second) for d in acc.add(chunk)]
    assert chunks[0]["choices"][0]["logprobs"] == {
        "tokens": [" a"], "token_logprobs": [-0.5], "top_logprobs": [{" a": -0.5}], "text_offset": [0]
    }  # fmt: skip
    assert chunks[1]["choices"][0]["logprobs"]["text_offset"] == [2]
    final = CompletionRender(request, "c", 1).response(acc)
    assert final["choices"][0]["logprobs"]["tokens"] == [" a", " b"]


def test_chat_logprobs_format() -> None:
    request = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 2}
    )
    assert to_generate_request(request, "m", "r").sampling["logprobs"] == 2
    acc = ChoiceAccumulator(1, top_logprobs=2)
    acc.add(GenerateChunk(["é"], ["stop"], 1, [1], logprobs=[_lp(("9", -0.1, 1, "é"), ("3", -3.0, 2, "e"))]))
    body = ChatRender(request, "id", 1).response(acc)
    content = body["choices"][0]["logprobs"]["content"]
    assert content == [
        {
            "token": "é",
            "logprob": -0.1,
            "bytes": [195, 169],
            "top_logprobs": [
                {"token": "é", "logprob": -0.1, "bytes": [195, 169]},
                {"token": "e", "logprob": -3.0, "bytes": [101]},
            ],
        }
    ]


TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]


def _chat(**fields) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "x"}], **fields})


def test_required_tool_choice_constrains_the_output_and_passes_tools_to_the_template() -> None:
    upstream = to_generate_request(_chat(tools=TOOLS, tool_choice="required"), "m", "r")
    assert upstream.sampling["structured_outputs"]["json"]["type"] == "array"
    assert upstream.chat_template_kwargs["tools"][0]["function"]["name"] == "f"


def test_forced_call_rendered_as_tool_calls_in_a_stream() -> None:
    render = ChatRender(_chat(tools=TOOLS, tool_choice="required", stream=True), "id", 1)
    acc = ChoiceAccumulator(1)
    chunks = [c for d in acc.add(GenerateChunk(['[{"name": "f", '], ["None"], 1, [1])) for c in render.chunks(d)]
    assert chunks == []  # held back until the call is complete
    chunks = [c for d in acc.add(GenerateChunk(['"parameters": {}}]'], ["stop"], 1, [1])) for c in render.chunks(d)]
    [chunk] = chunks
    choice = chunk["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["delta"]["role"] == "assistant"
    [call] = choice["delta"]["tool_calls"]
    assert call["index"] == 0 and call["function"] == {"name": "f", "arguments": "{}"}


def test_auto_tool_choice_uses_the_parser() -> None:
    from gateway.core.tools import tool_call_parser

    render = ChatRender(_chat(tools=TOOLS), "id", 1, tool_call_parser("hermes"))
    acc = ChoiceAccumulator(1)
    acc.add(GenerateChunk(['<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>'], ["stop"], 1, [9]))
    choice = render.response(acc)["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    assert choice["message"]["tool_calls"][0]["function"] == {"name": "f", "arguments": '{"a":1}'}


def test_response_format_json_schema_becomes_a_structured_output() -> None:
    schema = {"type": "object"}
    upstream = to_generate_request(
        _chat(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}), "m", "r"
    )
    assert upstream.sampling["structured_outputs"] == {"json": schema}
    upstream = to_generate_request(_chat(response_format={"type": "json_object"}), "m", "r")
    assert upstream.sampling["structured_outputs"] == {"json_object": True}
