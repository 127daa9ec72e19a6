"""vLLM's /tokenize and /detokenize bodies to backend calls and answers back (pure)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from gateway.core import chat, tokenize
from gateway.core.upstream import TokenizerAnswer
from gateway.errors import OpenAIError
from gateway.protocol import ChatCompletionRequest, DetokenizeRequest, TokenizeRequest

MESSAGES = [
    {"role": "developer", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


def _tokenize(**fields: Any) -> TokenizeRequest:
    return TokenizeRequest.model_validate({"model": "m", **fields})


def test_a_prompt_is_sent_as_text_with_the_backends_default_special_tokens() -> None:
    call = tokenize.tokenize_call(_tokenize(prompt="héllo"), "target", "r1")
    assert (call.model, call.request_id, call.text_input) == ("target", "r1", "héllo")
    assert call.messages is None and call.prompt_token_ids is None
    assert call.add_special_tokens is None and not call.return_token_strs
    explicit = tokenize.tokenize_call(_tokenize(prompt="x", add_special_tokens=False, return_token_strs=True), "m", "r")
    assert explicit.add_special_tokens is False and explicit.return_token_strs


def test_messages_are_sent_as_a_chat_completion_sends_them() -> None:
    """Same template messages and keyword arguments, so the count equals the chat's usage.prompt_tokens."""
    body = {"messages": MESSAGES, "tools": TOOLS, "chat_template_kwargs": {"enable_thinking": False}}
    call = tokenize.tokenize_call(_tokenize(**body), "m", "r")
    generation = chat.to_generate_request(ChatCompletionRequest.model_validate({"model": "m", **body}), "m", "r")
    assert call.messages == generation.messages
    assert call.chat_template_kwargs == {**(generation.chat_template_kwargs or {}), "add_generation_prompt": True}
    assert call.text_input is None


@pytest.mark.parametrize(
    ("fields", "kwargs"),
    [
        ({}, {"add_generation_prompt": True}),
        ({"add_generation_prompt": False}, {"add_generation_prompt": False}),
        ({"continue_final_message": True}, {"add_generation_prompt": False, "continue_final_message": True}),
    ],
)
def test_generation_prompt_and_continued_message_go_to_the_template(fields: dict, kwargs: dict) -> None:
    call = tokenize.tokenize_call(_tokenize(messages=MESSAGES, **fields), "m", "r")
    assert call.chat_template_kwargs == kwargs


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({}, "prompt"),
        ({"prompt": "a", "messages": MESSAGES}, "messages"),
        (
            {"messages": MESSAGES, "continue_final_message": True, "add_generation_prompt": True},
            "continue_final_message",
        ),
    ],
)
def test_bad_forms_are_400s_naming_the_field(fields: dict, param: str) -> None:
    with pytest.raises(OpenAIError) as caught:
        tokenize.tokenize_call(_tokenize(**fields), "m", "r")
    assert caught.value.status == 400 and caught.value.param == param


@pytest.mark.parametrize("tokens", [[], [-1], [2**31]])
def test_detokenize_refuses_no_tokens_and_ids_outside_int32(tokens: list[int]) -> None:
    with pytest.raises(ValidationError) as caught:
        DetokenizeRequest.model_validate({"model": "m", "tokens": tokens})
    assert caught.value.errors()[0]["loc"][0] == "tokens"


def test_detokenize_sends_token_ids() -> None:
    call = tokenize.detokenize_call(DetokenizeRequest(model="m", tokens=[1, 2, 3]), "m", "r")
    assert call.prompt_token_ids == [1, 2, 3] and call.text_input is None and call.messages is None


def test_a_backend_refusal_is_named_after_the_field_it_is_about() -> None:
    assert tokenize.tokenize_param(_tokenize(messages=MESSAGES)) == "messages"
    assert tokenize.tokenize_param(_tokenize(prompt="a")) == "prompt"
    refused = tokenize.naming(OpenAIError(400, "token id 99999 is out of the vocabulary"), "tokens")
    assert refused.param == "tokens" and refused.body()["error"]["type"] == "invalid_request_error"
    assert tokenize.naming(OpenAIError(400, "x", param="model"), "tokens").param == "model"
    assert tokenize.naming(OpenAIError(503, "down"), "tokens").param is None


def test_answers_in_vllms_shapes() -> None:
    answer = TokenizerAnswer("Hi there", [1, 2], 2048, ["Hi", "Ġthere"])
    assert tokenize.tokenize_response(answer, True) == {
        "count": 2, "max_model_len": 2048, "tokens": [1, 2], "token_strs": ["Hi", "Ġthere"]
    }  # fmt: skip
    assert tokenize.tokenize_response(answer, False)["token_strs"] is None
    assert tokenize.detokenize_response(answer) == {"prompt": "Hi there"}
