"""The Responses API's pure core: request schema, translation to chat, objects and the stream's events, each
object and event validated against OpenAI's published schemas."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from gateway.core.chat import ChatRender
from gateway.core.choices import ChoiceAccumulator
from gateway.core.tools import parse_hermes
from gateway.core.upstream import GenerateChunk
from gateway.errors import OpenAIError
from gateway.responses import objects, translate
from gateway.responses.protocol import ResponsesRequest
from gateway.responses.render import ResponsesRender
from tests.openai_spec import validate

WEATHER = {"type": "function", "name": "get_weather", "description": "Weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}

# The order of a stream's events: each kind may follow only these.
_NEXT = {
    None: {"response.created"},
    "response.created": {"response.in_progress"},
    "response.in_progress": {"response.output_item.added", "response.completed", "response.incomplete", "response.failed"},
    "response.output_item.added": {"response.content_part.added", "response.function_call_arguments.delta"},
    "response.content_part.added": {"response.output_text.delta", "response.output_text.done"},
    "response.output_text.delta": {"response.output_text.delta", "response.output_text.done"},
    "response.output_text.done": {"response.content_part.done"},
    "response.content_part.done": {"response.output_item.done"},
    "response.function_call_arguments.delta": {"response.function_call_arguments.delta", "response.function_call_arguments.done"},
    "response.function_call_arguments.done": {"response.output_item.done"},
    "response.output_item.done": {"response.output_item.added", "response.completed", "response.incomplete"},
}
_TERMINAL = {"response.completed", "response.incomplete", "response.failed"}


def check_stream(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Validates each event against the ResponseStreamEvent union, their numbering and order; returns the last
    event's response."""
    previous = None
    for number, event in enumerate(events):
        validate("ResponseStreamEvent", event)
        assert event["sequence_number"] == number
        allowed = _NEXT[previous] | ({"response.failed"} if previous is not None else set())  # fails anywhere
        assert event["type"] in allowed, (previous, event["type"])
        previous = event["type"]
    assert previous in _TERMINAL
    validate("Response", events[-1]["response"])
    return events[-1]["response"]


def _request(**fields: Any) -> ResponsesRequest:
    return ResponsesRequest.model_validate({"model": "m", "input": "Hello", **fields})


def _render(request: ResponsesRequest, history: list | None = None) -> tuple[ResponsesRender, ChoiceAccumulator]:
    chat_body = translate.chat_request(request, history or [], translate.canonical_items(request))
    chat = ChatRender(chat_body, "", 0, parse_hermes)
    return ResponsesRender(request, chat, "resp_1", 1700000000), ChoiceAccumulator(1)


def _run(render: ResponsesRender, acc: ChoiceAccumulator, pieces: list[str], reason: str = "stop") -> list[dict]:
    """Feeds the pieces as backend chunks, as Generation does, and returns the stream's events."""
    events: list[dict] = []
    for number, piece in enumerate(pieces):
        last = number == len(pieces) - 1
        chunk = GenerateChunk(texts=[piece], finish_reasons=[reason if last else None], num_input_tokens=5,
                              num_output_tokens=[1])
        for delta in acc.add(chunk):
            events += render.chunks(delta)
    return events + render.closing(acc, completed_at=1700000001)


def test_text_stream_validates_and_keeps_order() -> None:
    render, acc = _render(_request())
    events = _run(render, acc, ["Hel", "lo", " there"])
    response = check_stream(events)
    assert response["status"] == "completed"
    assert [e["delta"] for e in events if e["type"] == "response.output_text.delta"] == ["Hel", "lo", " there"]
    assert response["output"][0]["content"][0]["text"] == "Hello there"
    assert response["usage"]["output_tokens"] == 3 and response["usage"]["input_tokens"] == 5
    # the message keeps one id from output_item.added to the response
    ids = {e["item"]["id"] for e in events if e["type"].startswith("response.output_item")}
    assert ids == {response["output"][0]["id"]}
    validate("Response", render.response(acc))


def test_length_finish_is_incomplete_with_its_reason() -> None:
    render, acc = _render(_request(max_output_tokens=2))
    response = check_stream(_run(render, acc, ["a", "b"], reason="length"))
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["output"][0]["status"] == "incomplete"


def test_tool_call_stream_has_function_call_items() -> None:
    render, acc = _render(_request(tools=[WEATHER]))
    text = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    events = _run(render, acc, [text[:20], text[20:]])
    response = check_stream(events)
    assert not [e for e in events if e["type"] == "response.output_text.delta"]  # held back: it was a call
    (call,) = response["output"]
    assert call["type"] == "function_call" and call["name"] == "get_weather"
    assert call["arguments"] == '{"city":"Paris"}' and call["call_id"]
    done = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert done[0]["arguments"] == call["arguments"]


def test_tools_without_a_call_give_a_message() -> None:
    render, acc = _render(_request(tools=[WEATHER]))
    response = check_stream(_run(render, acc, ["just ", "text"]))
    assert [item["type"] for item in response["output"]] == ["message"]
    assert response["output"][0]["content"][0]["text"] == "just text"


def test_failure_event_and_empty_output() -> None:
    render, acc = _render(_request())
    events = render.failure(OpenAIError(502, "engine failed"))
    response = check_stream(events)
    assert response["status"] == "failed" and response["error"]["code"] == "server_error"


def test_response_object_fields_echo_the_request() -> None:
    request = _request(instructions="Be brief", temperature=0.5, top_p=0.9, metadata={"k": "v"}, user="u",
                       tools=[WEATHER], tool_choice={"type": "function", "name": "get_weather"},
                       text={"format": {"type": "json_schema", "name": "answer", "schema": {"type": "object"}}})
    response = objects.response_object(request, "resp_x", 1, status="in_progress")
    validate("Response", response)
    assert response["text"]["format"]["name"] == "answer" and response["tool_choice"]["name"] == "get_weather"
    assert response["metadata"] == {"k": "v"} and response["store"] is True


def test_chat_request_maps_fields_and_items() -> None:
    request = _request(
        instructions="sys",
        input=[
            {"role": "user", "content": "weather?"},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        ],
        max_output_tokens=7, tools=[WEATHER], tool_choice="required", parallel_tool_calls=False,
        text={"format": {"type": "json_object"}},
    )
    body = translate.chat_request(request, [], translate.canonical_items(request))
    assert [m.role for m in body.messages] == ["system", "user", "assistant", "tool"]
    assert body.messages[2].tool_calls[0]["function"]["name"] == "get_weather"
    assert body.messages[3].tool_call_id == "call_1" and body.messages[3].content == "sunny"
    assert body.max_completion_tokens == 7 and body.tool_choice == "required" and not body.parallel_tool_calls
    assert body.response_format.type == "json_object"
    assert body.tools[0].function.name == "get_weather"


def test_history_comes_before_the_new_input() -> None:
    request = _request(input="second")
    history = translate.canonical_items(_request(input="first")) + [translate.message_item("msg_a", "answer")]
    body = translate.chat_request(request, history, translate.canonical_items(request))
    assert [(m.role, m.content) for m in body.messages] == [("user", "first"), ("assistant", "answer"), ("user", "second")]


def test_canonical_items_are_valid_item_resources() -> None:
    request = _request(input=[
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "d"}]},
        {"role": "assistant", "content": "a"},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "o"},
    ])
    items = translate.canonical_items(request)
    for item in items:
        validate("ItemResource", item)
    assert len({item["id"] for item in items}) == 4


@pytest.mark.parametrize(
    "fields, param",
    [
        ({"background": True}, "background"),
        ({"reasoning": {"effort": "high"}}, "reasoning"),
        ({"frobnicate": 1}, "frobnicate"),
        ({"include": ["file_search_call.results"]}, "include"),
    ],
)
def test_unsupported_fields_are_refused_by_name(fields: dict, param: str) -> None:
    with pytest.raises(OpenAIError) as caught:
        _request(**fields).refuse_unsupported()
    assert caught.value.status == 400 and caught.value.param == param


def test_defaults_sent_by_sdks_are_accepted() -> None:
    _request(background=False, truncation="disabled", reasoning=None, service_tier="auto", include=[]).refuse_unsupported()


@pytest.mark.parametrize(
    "fields",
    [
        {"input": [{"type": "web_search_call", "id": "x"}]},
        {"tools": [{"type": "web_search"}]},
        {"text": {"format": {"type": "json_schema"}}},
        {"tool_choice": "sometimes"},
    ],
)
def test_invalid_requests_fail_validation(fields: dict) -> None:
    with pytest.raises(ValidationError):
        _request(**fields)


def test_named_tool_choice_must_be_a_tool() -> None:
    request = _request(tools=[WEATHER], tool_choice={"type": "function", "name": "other"})
    with pytest.raises(OpenAIError):
        translate.chat_request(request, [], translate.canonical_items(request))


def test_input_item_pages() -> None:
    items = [{"id": f"msg_{i}", "type": "message", "role": "user", "status": "completed",
              "content": [{"type": "input_text", "text": str(i)}]} for i in range(5)]
    page = objects.item_page(items, 2, "asc", None)
    validate("ResponseItemList", page)
    assert [i["id"] for i in page["data"]] == ["msg_0", "msg_1"] and page["has_more"]
    page = objects.item_page(items, 2, "asc", page["last_id"])
    assert [i["id"] for i in page["data"]] == ["msg_2", "msg_3"] and page["has_more"]
    page = objects.item_page(items, 2, "asc", page["last_id"])
    assert [i["id"] for i in page["data"]] == ["msg_4"] and not page["has_more"]
    desc = objects.item_page(items, 10, "desc", None)
    assert [i["id"] for i in desc["data"]] == [f"msg_{i}" for i in range(4, -1, -1)]
    with pytest.raises(ValueError):
        objects.item_page(items, 2, "asc", "msg_nope")


def _logprobs_json(token: str, logprob: float) -> str:
    """The backend's logprobs for one token: the sampled one first, then an alternative."""
    return f'[{{"7": {{"logprob": {logprob}, "rank": 1, "decoded_token": "{token}"}}, ' \
           f'"9": {{"logprob": -3.0, "rank": 2, "decoded_token": "x"}}}}]'  # fmt: skip


def test_included_logprobs_come_with_each_delta_and_the_text() -> None:
    request = _request(include=["message.output_text.logprobs"], top_logprobs=1)
    request.refuse_unsupported()
    assert request.logprobs == 1
    chat_body = translate.chat_request(request, [], translate.canonical_items(request))
    assert chat_body.logprobs is True and chat_body.top_logprobs == 1
    render = ResponsesRender(request, ChatRender(chat_body, "", 0, parse_hermes), "resp_1", 1700000000)
    acc = ChoiceAccumulator(1, top_logprobs=1)
    events: list[dict] = []
    # The last token has no text (end of sequence): its delta still brings its logprob.
    for number, (piece, logprob) in enumerate([("Hel", -0.5), ("lo", -0.25), ("", -1.0)]):
        chunk = GenerateChunk(texts=[piece], finish_reasons=["stop" if number == 2 else None], num_input_tokens=5,
                              num_output_tokens=[1], logprobs=[_logprobs_json(piece, logprob)])  # fmt: skip
        for delta in acc.add(chunk):
            events += render.chunks(delta)
    events += render.closing(acc, completed_at=1700000001)
    response = check_stream(events)
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert [d["logprobs"][0]["token"] for d in deltas] == ["Hel", "lo", ""]
    assert deltas[0]["logprobs"][0]["top_logprobs"][0]["token"] == "Hel"
    part = response["output"][0]["content"][0]
    assert [entry["logprob"] for entry in part["logprobs"]] == [-0.5, -0.25, -1.0]
    done = next(e for e in events if e["type"] == "response.output_text.done")
    assert done["logprobs"] == part["logprobs"]


def test_logprobs_are_left_out_unless_included() -> None:
    render, acc = _render(_request(top_logprobs=3))
    response = check_stream(_run(render, acc, ["a"]))
    assert response["output"][0]["content"][0]["logprobs"] == []
