"""vLLM's /tokenize and /detokenize, and max_model_len in /v1/models, on the real stack (SmolLM2 and its chat
template): counts agree with the generations' usage, the round trip gives the text back, errors are OpenAI's."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from localstack.model_repo import cpu_engine_args
from localstack.stack import LocalStack

MESSAGES = [
    {"role": "system", "content": "You answer in one word."},
    {"role": "user", "content": "What colour is the sky on a clear day?"},
]
TEXT = "Once upon a time, in a café far away, 42 robots sang «hello» together."
# model.json of the local stack sets it (localstack/model_repo.py).
MAX_MODEL_LEN = cpu_engine_args(Path("unused"))["max_model_len"]


@pytest.fixture(scope="module")
def http(stack: LocalStack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.gateway_url, timeout=120) as client:
        yield client


def _ok(response: httpx.Response) -> dict:
    assert response.status_code == 200, response.text
    return response.json()


def _error(response: httpx.Response, status: int, param: str | None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert error["param"] == param, error
    return error


def test_chat_tokenize_counts_what_the_chat_completion_reports(http: httpx.Client, model_name: str) -> None:
    tokenized = _ok(http.post("/tokenize", json={"model": model_name, "messages": MESSAGES}))
    chat = _ok(http.post("/v1/chat/completions", json={"model": model_name, "messages": MESSAGES, "max_tokens": 1}))
    assert tokenized["count"] == chat["usage"]["prompt_tokens"] == len(tokenized["tokens"])
    assert tokenized["max_model_len"] == MAX_MODEL_LEN and tokenized["token_strs"] is None
    bare = {"model": model_name, "messages": MESSAGES, "add_generation_prompt": False}
    without = _ok(http.post("/tokenize", json=bare))
    # The generation prompt (`<|im_start|>assistant\n`) is the only difference.
    assert without["tokens"] == tokenized["tokens"][: without["count"]] and without["count"] < tokenized["count"]
    rendered = _ok(http.post("/detokenize", json={"model": model_name, "tokens": tokenized["tokens"]}))["prompt"]
    assert rendered.startswith("<|im_start|>system\nYou answer in one word.")
    assert rendered.endswith("<|im_start|>assistant\n")


def test_prompt_tokenize_counts_what_the_completion_reports(http: httpx.Client, model_name: str) -> None:
    tokenized = _ok(http.post("/tokenize", json={"model": model_name, "prompt": TEXT}))
    completion = _ok(http.post("/v1/completions", json={"model": model_name, "prompt": TEXT, "max_tokens": 1}))
    assert tokenized["count"] == completion["usage"]["prompt_tokens"] > 10
    assert _ok(http.post("/v1/tokenize", json={"model": model_name, "prompt": TEXT})) == tokenized


def test_detokenize_gives_the_tokenized_text_back(http: httpx.Client, model_name: str) -> None:
    body = {"model": model_name, "prompt": TEXT, "return_token_strs": True}
    tokenized = _ok(http.post("/tokenize", json=body))
    assert len(tokenized["token_strs"]) == tokenized["count"]
    assert tokenized["token_strs"][0] == "Once"  # byte-level BPE: a space shows as Ġ
    assert "Ġupon" in tokenized["token_strs"]
    detokenized = _ok(http.post("/detokenize", json={"model": model_name, "tokens": tokenized["tokens"]}))
    assert detokenized == {"prompt": TEXT}


def test_models_report_the_context_length(http: httpx.Client, model_name: str) -> None:
    listed = {entry["id"]: entry for entry in _ok(http.get("/v1/models"))["data"]}
    assert listed[model_name]["max_model_len"] == MAX_MODEL_LEN
    assert listed["smollm2"]["max_model_len"] == MAX_MODEL_LEN  # an alias (the session stack's)
    assert _ok(http.get(f"/v1/models/{model_name}"))["max_model_len"] == MAX_MODEL_LEN


def test_an_unknown_model_is_a_404(http: httpx.Client) -> None:
    for path, body in (("/tokenize", {"prompt": "hi"}), ("/detokenize", {"tokens": [1, 2]})):
        error = _error(http.post(path, json={"model": "no-such-model", **body}), 404, "model")
        assert error["code"] == "model_not_found"


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/detokenize", {"tokens": []}, "tokens"),
        ("/detokenize", {"tokens": [1, 10_000_000]}, "tokens"),  # a valid int32, far past the vocabulary
        ("/detokenize", {"tokens": [-1]}, "tokens.0"),
        ("/detokenize", {}, "tokens"),
        ("/tokenize", {}, "prompt"),
        ("/tokenize", {"prompt": "a", "messages": MESSAGES}, "messages"),
        ("/tokenize", {"messages": []}, "messages"),
        ("/tokenize", {"messages": MESSAGES, "add_generation_prompt": True, "continue_final_message": True},
         "continue_final_message"),
    ],
)  # fmt: skip
def test_bad_input_is_a_400_naming_the_field(
    http: httpx.Client, model_name: str, path: str, body: dict, param: str
) -> None:
    error = _error(http.post(path, json={"model": model_name, **body}), 400, param)
    assert error["type"] == "invalid_request_error"
    if 10_000_000 in body.get("tokens", []):
        assert "10000000" in error["message"] and "vocabulary" in error["message"]


def test_keys_and_admission_apply(stack: LocalStack, model_name: str, tmp_path: Path) -> None:
    keys = tmp_path / "keys.jsonl"
    entries = [
        {"name": "rpm2", "key": "sk-rpm2", "rpm": 2},
        {"name": "elsewhere", "key": "sk-elsewhere", "models": ["not-this-one"]},
    ]
    keys.write_text("".join(json.dumps(entry) + "\n" for entry in entries))
    with stack.extra_gateway("gateway-tokenize-keys", {"GATEWAY_API_KEYS_FILE": str(keys)}) as (_, url):

        def post(path: str, key: str | None, **body: object) -> httpx.Response:
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            return httpx.post(f"{url}{path}", json={"model": model_name, **body}, headers=headers, timeout=60)

        assert _error(post("/tokenize", None, prompt="hi"), 401, None)["code"] == "invalid_api_key"
        assert _error(post("/detokenize", "sk-wrong", tokens=[1]), 401, None)["code"] == "invalid_api_key"
        assert _error(post("/tokenize", "sk-elsewhere", prompt="hi"), 404, "model")["code"] == "model_not_found"
        first, second = post("/tokenize", "sk-rpm2", prompt="hi"), post("/detokenize", "sk-rpm2", tokens=[1])
        assert first.status_code == second.status_code == 200
        assert second.headers["x-ratelimit-remaining-requests"] == "0"
        third = post("/tokenize", "sk-rpm2", prompt="hi")
        assert _error(third, 429, None)["code"] == "rate_limit_exceeded" and third.headers["retry-after"]
