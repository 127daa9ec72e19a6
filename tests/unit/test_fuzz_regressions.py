"""Requests that fuzzing (tests/e2e/test_fuzz.py) or its probes found answered with a 5xx; each now gets a 400."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from gateway.core.triton_codec import encode_request
from gateway.core.upstream import GenerateRequest
from gateway.errors import OpenAIError
from gateway.protocol import ChatCompletionRequest, CompletionRequest


@pytest.mark.parametrize(
    ("field", "value"),
    [("seed", 2**64), ("seed", -(2**63) - 1), ("top_k", 2**64), ("min_tokens", 2**64), ("stop_token_ids", [2**64])],
)
def test_integers_past_64_bits_are_refused_before_the_engine(field: str, value: object) -> None:
    # Sent on, each failed inside the engine's serializer: a 502 with an empty message.
    with pytest.raises(ValidationError, match=field):
        CompletionRequest.model_validate({"model": "m", "prompt": "hi", field: value})


@pytest.mark.parametrize("field", ["seed", "top_k", "min_tokens"])
def test_the_64_bit_bounds_themselves_are_accepted(field: str) -> None:
    body = CompletionRequest.model_validate({"model": "m", "prompt": "hi", field: 2**63 - 1})
    assert getattr(body, field) == 2**63 - 1
    assert CompletionRequest.model_validate({"model": "m", "prompt": "hi", "seed": -(2**63)}).seed == -(2**63)


def _unpaired_surrogate(text: str) -> str:
    """What the JSON parser makes of an escaped half of a UTF-16 pair: a str that UTF-8 cannot encode."""
    return json.loads(json.dumps(text).replace("X", "\\ud800"))


def test_an_unpaired_surrogate_in_a_prompt_is_a_400_not_a_500() -> None:
    prompt = _unpaired_surrogate("aXb")
    body = CompletionRequest.model_validate({"model": "m", "prompt": prompt})
    request = GenerateRequest(model="m", request_id="r", sampling={}, stream=False, text_input=body.prompt)
    with pytest.raises(OpenAIError) as caught:
        encode_request(request)
    assert caught.value.status == 400 and "surrogate" in caught.value.message


def test_an_unpaired_surrogate_in_chat_messages_is_a_400_not_a_500() -> None:
    content = _unpaired_surrogate("aXb")
    body = ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": content}]})
    messages = [message.model_dump(exclude_none=True) for message in body.messages]
    request = GenerateRequest(model="m", request_id="r", sampling={}, stream=False, messages=messages)
    with pytest.raises(OpenAIError) as caught:
        encode_request(request)
    assert caught.value.status == 400
