from __future__ import annotations

import pytest

from gateway.core.chat import ChatRender, template_messages, to_generate_request
from gateway.core.choices import ChoiceAccumulator
from gateway.core.upstream import GenerateChunk
from gateway.errors import OpenAIError
from gateway.protocol import ChatCompletionRequest


def _request(**fields) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "Hi"}], **fields}
    )


def test_messages_are_normalized_for_the_chat_template() -> None:
    request = _request(
        messages=[
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "t", "type": "function"}]},
            {"role": "tool", "content": "42", "tool_call_id": "t"},
        ]
    )
    assert template_messages(request.messages) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "a\nb"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "t", "type": "function"}]},
        {"role": "tool", "content": "42", "tool_call_id": "t"},
    ]


def test_image_parts_are_refused_with_a_400() -> None:
    request = _request(
        messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}]
    )
    with pytest.raises(OpenAIError) as info:
        to_generate_request(request, "m", "x")
    assert info.value.status == 400 and info.value.param == "messages.0.content"


def test_max_completion_tokens_wins_over_max_tokens() -> None:
    upstream = to_generate_request(_request(max_tokens=5, max_completion_tokens=9), "m", "x")
    assert upstream.sampling["max_tokens"] == 9
    assert to_generate_request(_request(), "m", "x").sampling["max_tokens"] is None  # until the context is full


def test_first_chunk_carries_the_role_with_the_first_text() -> None:
    render = ChatRender(_request(stream=True), "chatcmpl-1", 7)
    acc = ChoiceAccumulator(1)
    chunks = [render.chunks(d)[0] for d in acc.add(GenerateChunk(["Par"], ["None"], 3, [1]))]
    chunks += [render.chunks(d)[0] for d in acc.add(GenerateChunk(["is"], ["stop"], 3, [1], final=True))]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": "Par"}
    assert chunks[1]["choices"][0]["delta"] == {"content": "is"}
    assert chunks[1]["choices"][0]["finish_reason"] == "stop"
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert "usage" not in chunks[0]


def test_final_empty_delta_has_no_content() -> None:
    render = ChatRender(_request(stream=True), "c", 1)
    acc = ChoiceAccumulator(1)
    [first] = [render.chunks(d)[0] for d in acc.add(GenerateChunk(["x"], ["None"], 1, [1]))]
    [last] = [render.chunks(d)[0] for d in acc.add(GenerateChunk([""], ["length"], 1, [0], final=True))]
    assert last["choices"][0]["delta"] == {}
    assert last["choices"][0]["finish_reason"] == "length"


def test_response_object() -> None:
    render = ChatRender(_request(), "chatcmpl-2", 3)
    acc = ChoiceAccumulator(1)
    acc.add(GenerateChunk(["Paris."], ["stop"], 10, [3], final=True))
    body = render.response(acc)
    assert body["object"] == "chat.completion"
    assert body["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Paris.", "refusal": None},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ]
    assert body["usage"] == {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}
