from __future__ import annotations

import pytest

from gateway.core.caps import Caps, check_chat, check_completion, with_default_token_limit
from gateway.errors import OpenAIError
from gateway.protocol import ChatCompletionRequest, CompletionRequest

CAPS = Caps(max_n=4, max_tokens=100, max_prompts=2)


def _chat(**fields: object) -> ChatCompletionRequest:
    return ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], **fields)


def _refused(call: object, *args: object) -> OpenAIError:
    with pytest.raises(OpenAIError) as caught:
        call(*args)  # type: ignore[operator]
    assert caught.value.status == 400 and caught.value.type == "invalid_request_error"
    return caught.value


@pytest.mark.parametrize(
    ("fields", "param"),
    [({"n": 5}, "n"), ({"max_tokens": 101}, "max_tokens"), ({"max_completion_tokens": 101}, "max_completion_tokens")],
)
def test_chat_over_a_cap_is_a_400_naming_the_param(fields: dict, param: str) -> None:
    error = _refused(check_chat, _chat(**fields), CAPS)
    assert error.param == param and error.message.startswith(param)


def test_completions_over_a_cap_is_a_400_naming_the_param() -> None:
    assert _refused(check_completion, CompletionRequest(model="m", prompt="x", n=5), 1, CAPS).param == "n"
    assert _refused(check_completion, CompletionRequest(model="m", prompt="x", max_tokens=101), 1, CAPS).param == (
        "max_tokens"
    )
    error = _refused(check_completion, CompletionRequest(model="m", prompt=["a", "b", "c"]), 3, CAPS)
    assert error.param == "prompt" and "3 prompts" in error.message


def test_at_the_caps_and_without_caps_requests_pass() -> None:
    check_chat(_chat(n=4, max_tokens=100, max_completion_tokens=100), CAPS)
    check_completion(CompletionRequest(model="m", prompt=["a", "b"], n=4, max_tokens=100), 2, CAPS)
    check_chat(_chat(n=128, max_tokens=10**6), Caps())
    check_completion(CompletionRequest(model="m", prompt=["a"] * 500), 500, Caps())


def test_the_token_cap_is_the_limit_of_requests_that_set_none() -> None:
    assert with_default_token_limit(_chat(), CAPS).token_limit == 100
    assert with_default_token_limit(_chat(max_tokens=7), CAPS).token_limit == 7
    assert with_default_token_limit(CompletionRequest(model="m", prompt="x", max_tokens=None), CAPS).max_tokens == 100
    assert with_default_token_limit(CompletionRequest(model="m", prompt="x"), CAPS).max_tokens == 16
    assert with_default_token_limit(_chat(), Caps()).token_limit is None
