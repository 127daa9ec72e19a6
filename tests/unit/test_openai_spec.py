"""The OpenAI-spec validator accepts conforming objects and rejects non-conforming ones."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from jsonschema import ValidationError

from tests.openai_spec import validate, validate_completion_chunk

USAGE = {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}
BASE = {"id": "chatcmpl-1", "created": 1700000000, "model": "m"}
MODEL = {"id": "m", "object": "model", "created": 0, "owned_by": "me"}

CHAT_COMPLETION: dict[str, Any] = {
    **BASE,
    "object": "chat.completion",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Hi", "refusal": None},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ],
    "usage": USAGE,
}
CHAT_CHUNK: dict[str, Any] = {
    **BASE,
    "object": "chat.completion.chunk",
    "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi"}, "logprobs": None, "finish_reason": None}],
}
CHAT_USAGE_CHUNK: dict[str, Any] = {**BASE, "object": "chat.completion.chunk", "choices": [], "usage": USAGE}
TEXT_COMPLETION: dict[str, Any] = {
    **BASE,
    "id": "cmpl-1",
    "object": "text_completion",
    "choices": [{"index": 0, "text": "Hi", "logprobs": None, "finish_reason": "length"}],
    "usage": USAGE,
}


def _with(obj: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    target = out
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return out


@pytest.mark.parametrize(
    ("schema", "instance"),
    [
        ("CreateChatCompletionResponse", CHAT_COMPLETION),
        ("CreateChatCompletionStreamResponse", CHAT_CHUNK),
        ("CreateChatCompletionStreamResponse", _with(CHAT_CHUNK, ("usage",), None)),
        ("CreateChatCompletionStreamResponse", CHAT_USAGE_CHUNK),
        ("CreateCompletionResponse", TEXT_COMPLETION),
        (
            "ErrorResponse",
            {"error": {"message": "m", "type": "invalid_request_error", "param": None, "code": None}},
        ),
        ("Model", MODEL),
        ("ListModelsResponse", {"object": "list", "data": [MODEL]}),
        ("ListModelsResponse", {"object": "list", "data": []}),
        ("Model", {**MODEL, "max_model_len": 2048}),  # vLLM's model card field, as /v1/models sends it
        ("ListModelsResponse", {"object": "list", "data": [{**MODEL, "max_model_len": None}]}),
    ],
)
def test_conforming_objects_pass(schema: str, instance: dict[str, Any]) -> None:
    validate(schema, instance)


@pytest.mark.parametrize(
    ("schema", "instance", "message"),
    [
        ("CreateChatCompletionResponse", {k: v for k, v in CHAT_COMPLETION.items() if k != "id"}, "'id' is a required"),
        ("CreateChatCompletionStreamResponse", _with(CHAT_CHUNK, ("object",), "chat.completion"), "is not one of"),
        ("CreateChatCompletionStreamResponse", _with(CHAT_CHUNK, ("choices", 0, "finish_reason"), "eos"), "'eos'"),
        ("CreateChatCompletionResponse", _with(CHAT_COMPLETION, ("usage", "prompt_tokens"), "5"), "'5' is not of type"),
        ("CreateChatCompletionStreamResponse", _with(CHAT_USAGE_CHUNK, ("usage", "total_tokens"), "12"), "'12'"),
        ("CreateCompletionResponse", _with(TEXT_COMPLETION, ("choices", 0, "finish_reason"), None), "None"),
        ("ErrorResponse", {"error": {"message": "m", "type": "t"}}, "is a required property"),
        ("Model", {"id": "m", "object": "model", "created": 0}, "'owned_by' is a required"),
    ],
)
def test_nonconforming_objects_fail(schema: str, instance: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        validate(schema, instance)


def test_completion_stream_chunks_allow_null_finish_reason_and_usage_only() -> None:
    chunk = _with(TEXT_COMPLETION, ("choices", 0, "finish_reason"), None)
    chunk["usage"] = None
    validate_completion_chunk(chunk)
    validate_completion_chunk({**TEXT_COMPLETION, "choices": []})
    with pytest.raises(ValidationError, match="is not one of"):
        validate_completion_chunk(_with(chunk, ("object",), "text_completion.chunk"))
    with pytest.raises(ValidationError, match="'eos'"):
        validate_completion_chunk(_with(chunk, ("choices", 0, "finish_reason"), "eos"))


ECHOED_LOGPROBS = {"tokens": ["Hi", "!"], "token_logprobs": [None, -0.5], "top_logprobs": [None, {"!": -0.5}],
                   "text_offset": [0, 2]}  # fmt: skip


def test_completion_logprobs_allow_the_echoed_first_tokens_nulls_only() -> None:
    echoed = _with(TEXT_COMPLETION, ("choices", 0, "logprobs"), ECHOED_LOGPROBS)
    validate("CreateCompletionResponse", echoed)
    validate_completion_chunk(echoed)
    with pytest.raises(ValidationError, match="'x' is not"):
        validate("CreateCompletionResponse", _with(echoed, ("choices", 0, "logprobs", "token_logprobs", 1), "x"))
    with pytest.raises(ValidationError, match="None is not"):
        validate("CreateCompletionResponse", _with(echoed, ("choices", 0, "logprobs", "tokens", 0), None))


def test_unknown_schema_name_is_an_error() -> None:
    with pytest.raises(KeyError, match="NoSuchSchema"):
        validate("NoSuchSchema", {})
