"""The Responses API on the real stack (the fast model): the OpenAI SDK's `responses.create` and `.stream`,
stored responses and conversation state, keys, bad input, and client disconnects. The model's text is random:
the tests check structure, never content. Function calls need a model that writes them (the random one fills a
forced call's JSON with whitespace until the token limit): they are in tests/e2e/test_responses_tools.py, on
SmolLM2."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from localstack.processes import wait_until
from localstack.stack import LocalStack
from tests.engine_counts import aborts, assert_generation_stopped, engine_paused
from tests.metrics_text import sample_value
from tests.openai_spec import validate
from tests.postgres_server import postgres_server
from tests.unit.test_responses_core import check_stream

ALICE, BOB = "sk-alice", "sk-bob"
WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                          "required": ["city"], "additionalProperties": False}}  # fmt: skip
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}  # fmt: skip


@contextmanager
def _gateway(stack: LocalStack, name: str, env: dict[str, str]) -> Iterator[str]:
    with stack.extra_gateway(name, env) as (_, url):
        yield url


@pytest.fixture(scope="module")
def keys_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    path = tmp_path_factory.mktemp("keys") / "keys.jsonl"
    path.write_text('{"name": "alice", "key": "sk-alice"}\n{"name": "bob", "key": "sk-bob"}\n')
    return {"GATEWAY_API_KEYS_FILE": str(path)}


@pytest.fixture(scope="module")
def gateway(fast_stack: LocalStack, keys_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    env = {**keys_env, "GATEWAY_DATA_DIR": str(tmp_path_factory.mktemp("responses-data"))}
    with _gateway(fast_stack, "gateway-responses", env) as url:
        yield url


@pytest.fixture(scope="module")
def model(fast_stack: LocalStack) -> str:
    return fast_stack.config.model_name


def _client(url: str, key: str = ALICE) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=120)


def _post(url: str, body: dict[str, Any], key: str = ALICE) -> httpx.Response:
    return httpx.post(f"{url}/v1/responses", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=120)


def _get(url: str, path: str, key: str = ALICE, **params: Any) -> httpx.Response:
    return httpx.get(f"{url}/v1/responses{path}", params=params, headers={"Authorization": f"Bearer {key}"}, timeout=30)


def _events(url: str, body: dict[str, Any], key: str = ALICE) -> list[dict[str, Any]]:
    """A streamed response's events, checking that each `event:` line names its data's type."""
    events = []
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.stream("POST", f"{url}/v1/responses", json={**body, "stream": True}, headers=headers, timeout=120) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        name = None
        for line in r.iter_lines():
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                event = json.loads(line.removeprefix("data: "))
                assert event["type"] == name
                events.append(event)
    return events


def test_create_with_the_sdk(gateway: str, model: str) -> None:
    client = _client(gateway)
    raw = client.responses.with_raw_response.create(model=model, input="Say hi", max_output_tokens=12,
                                                    instructions="Be brief", metadata={"case": "create"})
    validate("Response", raw.http_response.json())
    response = raw.parse()
    assert response.status in ("completed", "incomplete") and response.output[0].type == "message"
    assert response.output_text == response.output[0].content[0].text
    assert response.usage.output_tokens <= 12 and response.usage.input_tokens > 0
    assert response.metadata == {"case": "create"} and response.instructions == "Be brief"
    stored = _get(gateway, f"/{response.id}").json()
    validate("Response", stored)
    assert stored["output"] == raw.http_response.json()["output"]


def test_stream_events_validate_one_by_one_in_order(gateway: str, model: str) -> None:
    events = _events(gateway, {"model": model, "input": "Tell a story", "max_output_tokens": 20})
    final = check_stream(events)
    assert final["status"] == "incomplete" or final["status"] == "completed"
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert deltas == final["output"][0]["content"][0]["text"]
    assert _get(gateway, f"/{final['id']}").json()["output"] == final["output"]  # stored before the last event


def test_stream_with_the_sdk(gateway: str, model: str) -> None:
    client = _client(gateway)
    with client.responses.stream(model=model, input="Hello", max_output_tokens=10) as stream:
        events = list(stream)
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    final = events[-1].response  # get_final_response() wants response.completed, as with OpenAI
    assert final.output_text == final.output[0].content[0].text


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
def test_included_logprobs(gateway: str, model: str, stream: bool) -> None:
    body = {"model": model, "input": "Hello", "max_output_tokens": 6, "include": ["message.output_text.logprobs"],
            "top_logprobs": 2}  # fmt: skip
    if stream:
        events = _events(gateway, body)
        final = check_stream(events)
        deltas = [e for e in events if e["type"] == "response.output_text.delta"]
        assert sum(len(d["logprobs"]) for d in deltas) == final["usage"]["output_tokens"]
    else:
        final = _post(gateway, body).json()
        validate("Response", final)
    part = final["output"][0]["content"][0]
    assert len(part["logprobs"]) == final["usage"]["output_tokens"] >= 1
    for entry in part["logprobs"]:
        assert entry["logprob"] <= 0 and 1 <= len(entry["top_logprobs"]) <= 2


def test_max_output_tokens_makes_an_incomplete_response(gateway: str, model: str) -> None:
    response = _post(gateway, {"model": model, "input": "Write a long poem", "max_output_tokens": 3}).json()
    # random text may end early; when it does not, the reason is the token limit
    if response["status"] == "incomplete":
        assert response["incomplete_details"] == {"reason": "max_output_tokens"}
        assert response["usage"]["output_tokens"] == 3


@pytest.mark.parametrize("stream", [False, True])
def test_json_schema_output(gateway: str, model: str, stream: bool) -> None:
    client = _client(gateway)
    fmt = {"format": {"type": "json_schema", "name": "person", "schema": PERSON, "strict": True}}
    kwargs = {"model": model, "input": "Invent a person as JSON.", "text": fmt, "max_output_tokens": 60}
    if stream:
        with client.responses.stream(**kwargs) as events:
            response = list(events)[-1].response
    else:
        response = client.responses.create(**kwargs)
    if response.status == "completed":
        person = json.loads(response.output_text)
        assert set(person) == {"name", "age"} and isinstance(person["age"], int)
    assert response.text.format.type == "json_schema"


def test_input_items_are_paginated(gateway: str, model: str) -> None:
    messages = [{"role": "user", "content": f"message {i}"} for i in range(5)]
    created = _post(gateway, {"model": model, "input": messages, "max_output_tokens": 2}).json()
    ids, after = [], None
    while True:
        params = {"limit": 2, "order": "asc", **({"after": after} if after else {})}
        page = _get(gateway, f"/{created['id']}/input_items", **params).json()
        validate("ResponseItemList", page)
        ids += [item["id"] for item in page["data"]]
        assert [item["content"][0]["text"] for item in page["data"]] == [f"message {len(ids) - len(page['data']) + i}" for i in range(len(page["data"]))]
        if not page["has_more"]:
            break
        after = page["last_id"]
    assert len(ids) == 5 and len(set(ids)) == 5
    newest_first = _get(gateway, f"/{created['id']}/input_items").json()  # default order: desc
    assert [item["id"] for item in newest_first["data"]] == ids[::-1]
    assert _get(gateway, f"/{created['id']}/input_items", limit=0).status_code == 400
    assert _get(gateway, f"/{created['id']}/input_items", after="msg_nope").status_code == 400


def _error(response: httpx.Response, status: int, param: str | None = None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    if param is not None:
        assert error["param"] == param, error
    return error


def test_bad_input_is_refused_in_openai_shape(gateway: str, model: str) -> None:
    _error(_post(gateway, {"model": model, "input": [{"type": "web_search_call", "id": "ws_1"}]}), 400)
    _error(_post(gateway, {"model": model, "input": "x", "background": True}), 400, "background")
    _error(_post(gateway, {"model": model, "input": "x", "reasoning": {"effort": "high"}}), 400, "reasoning")
    _error(_post(gateway, {"model": model, "input": "x", "tools": [{"type": "web_search"}]}), 400)
    _error(_post(gateway, {"model": model, "input": "x", "previous_response_id": "resp_nope"}), 404, "previous_response_id")
    _error(_post(gateway, {"model": "no-such-model", "input": "x"}), 404, "model")
    _error(_get(gateway, "/resp_nope"), 404)
    sdk = _client(gateway)
    with pytest.raises(openai.BadRequestError):
        sdk.responses.create(model=model, input="x", extra_body={"frobnicate": 1})


def test_get_delete_and_cancel(gateway: str, model: str) -> None:
    created = _post(gateway, {"model": model, "input": "Hi", "max_output_tokens": 2}).json()
    headers = {"Authorization": f"Bearer {ALICE}"}
    cancel = httpx.post(f"{gateway}/v1/responses/{created['id']}/cancel", headers=headers, timeout=30)
    assert "background" in _error(cancel, 400)["message"]
    deleted = httpx.delete(f"{gateway}/v1/responses/{created['id']}", headers=headers, timeout=30)
    assert deleted.json() == {"id": created["id"], "object": "response", "deleted": True}
    _error(_get(gateway, f"/{created['id']}"), 404)
    _error(httpx.delete(f"{gateway}/v1/responses/{created['id']}", headers=headers, timeout=30), 404)
    unstored = _post(gateway, {"model": model, "input": "Hi", "max_output_tokens": 2, "store": False}).json()
    assert unstored["store"] is False
    _error(_get(gateway, f"/{unstored['id']}"), 404)


def test_another_key_sees_nothing(gateway: str, model: str) -> None:
    created = _post(gateway, {"model": model, "input": "Hi", "max_output_tokens": 2}).json()
    _error(_get(gateway, f"/{created['id']}", key=BOB), 404)
    _error(_get(gateway, f"/{created['id']}/input_items", key=BOB), 404)
    _error(httpx.delete(f"{gateway}/v1/responses/{created['id']}", headers={"Authorization": f"Bearer {BOB}"}), 404)
    _error(_post(gateway, {"model": model, "input": "x", "previous_response_id": created["id"]}, key=BOB), 404)
    assert _get(gateway, f"/{created['id']}").status_code == 200
    assert _post(gateway, {"model": model, "input": "x"}, key="sk-wrong").status_code == 401


def _engine(stack: LocalStack, name: str, model: str) -> float:
    return sample_value(httpx.get(stack.triton_metrics_url, timeout=5).text, name, model=model) or 0.0


def _read_first_delta(url: str, body: dict, first: threading.Event) -> None:
    """Reads a stream up to its first text delta, sets `first`, and leaves (closing the connection). Not its first
    line: `response.created` goes out before the request reaches the engine, and a client that left then could
    be gone before the backend ever had the request to abort."""
    headers = {"Authorization": f"Bearer {ALICE}"}
    with httpx.stream("POST", f"{url}/v1/responses", json=body, headers=headers, timeout=30) as response:
        lines = response.iter_lines()
        assert next(lines) == "event: response.created"
        for line in lines:
            if line == "event: response.output_text.delta":
                first.set()
                return


def test_a_client_disconnect_cancels_the_engine_request(fast_stack: LocalStack, gateway: str, model: str) -> None:
    body = {"model": model, "input": "Tell a very long story.", "max_output_tokens": 1900, "stream": True}
    before = _engine(fast_stack, "vllm:generation_tokens_total", model)
    before_disconnects = _disconnects(gateway, model)
    before_cancellations = _cancellations(gateway, model)
    aborted = aborts(fast_stack)
    with engine_paused(fast_stack) as engine:  # the response cannot end by itself before the client leaves
        first = threading.Event()
        reader = threading.Thread(target=_read_first_delta, args=(gateway, body, first), daemon=True)
        reader.start()
        engine.run_until(first.is_set)
        reader.join(timeout=10)
        left = wait_until(lambda: _disconnects(gateway, model) > before_disconnects, 5, 0.05)
        assert left, "the gateway did not count the client's leaving"
        cancelled = wait_until(lambda: _cancellations(gateway, model) > before_cancellations, 5, 0.05)
        assert cancelled, "the gateway did not cancel its Triton stream"
        engine.hold_until_aborted(aborted)  # the cancel reached the backend, which queued the abort
    assert_generation_stopped(fast_stack.triton_metrics_url, model)
    generated = _engine(fast_stack, "vllm:generation_tokens_total", model) - before
    assert generated < 1900, f"the response ran to its end: {generated} tokens"


def _cancellations(gateway: str, model: str) -> float:
    """The gateway's cancels of Triton streams whose reader went away (gateway/triton_client.py)."""
    metrics = httpx.get(f"{gateway}/metrics", headers={"Authorization": f"Bearer {ALICE}"}, timeout=5).text
    return sample_value(metrics, "gateway_triton_cancellations_total", model=model, reason="closed") or 0.0


def _disconnects(gateway: str, model: str) -> float:
    metrics = httpx.get(f"{gateway}/metrics", headers={"Authorization": f"Bearer {ALICE}"}, timeout=5).text
    return sample_value(metrics, "gateway_client_disconnects_total", model=model, endpoint="responses") or 0.0


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_responses_survive_a_gateway_restart(
    fast_stack: LocalStack, keys_env: dict[str, str], model: str, tmp_path: Path, database: str
) -> None:
    env = {**keys_env, "GATEWAY_DATA_DIR": str(tmp_path / "data")}
    with postgres_server() if database == "postgresql" else _nothing() as url:
        if url:
            env["GATEWAY_DATABASE_URL"] = url
        with _gateway(fast_stack, f"gateway-restart-{database}", env) as gateway:
            first = _post(gateway, {"model": model, "input": "Remember me", "max_output_tokens": 4}).json()
        with _gateway(fast_stack, f"gateway-restart-{database}", env) as gateway:
            assert _get(gateway, f"/{first['id']}").json() == first
            follow = _post(gateway, {"model": model, "input": "And now?", "previous_response_id": first["id"],
                                     "max_output_tokens": 4})  # fmt: skip
            assert follow.status_code == 200 and follow.json()["usage"]["input_tokens"] > first["usage"]["input_tokens"]
    if database == "sqlite":
        assert (tmp_path / "data" / "responses.db").exists()


@contextmanager
def _nothing() -> Iterator[None]:
    yield None
