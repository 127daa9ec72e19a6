from __future__ import annotations

import json
import re

import jsonschema
import pytest

from gateway.core.tools import (
    ParsedToolCall,
    new_tool_call_id,
    openai_tool_calls,
    parse_forced_tool_calls,
    tool_call_parser,
    tool_calls_schema,
)

WEATHER = ParsedToolCall("get_weather", '{"city":"Paris"}')
TIME = ParsedToolCall("get_time", '{"zone":"UTC"}')


def _tool(name: str, parameters: dict | None = None) -> dict:
    function: dict = {"name": name, "description": f"{name} tool"}
    if parameters is not None:
        function["parameters"] = parameters
    return {"type": "function", "function": function}


CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [_tool("get_weather", CITY), _tool("get_time")]


def test_unknown_parser_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="hermes, llama3_json, mistral"):
        tool_call_parser("pythonic")


# hermes


def test_hermes_one_call_tolerates_whitespace_in_tags() -> None:
    text = '<tool_call>\n  {"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    assert tool_call_parser("hermes")(text) == (None, [WEATHER])


def test_hermes_several_calls_with_content_around() -> None:
    text = (
        "Let me check.\n"
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>\n'
        '<tool_call>{"name": "get_time", "arguments": {"zone": "UTC"}}</tool_call>\n'
        "Done."
    )
    assert tool_call_parser("hermes")(text) == ("Let me check.\n\n\nDone.", [WEATHER, TIME])


def test_hermes_final_block_may_lack_its_closing_tag() -> None:
    text = 'Sure. <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}'
    assert tool_call_parser("hermes")(text) == ("Sure.", [WEATHER])


def test_hermes_malformed_block_is_kept_as_content() -> None:
    bad = '<tool_call>{"name": "get_time", "arguments": {</tool_call>'
    good = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    assert tool_call_parser("hermes")(bad + good) == (bad, [WEATHER])
    assert tool_call_parser("hermes")(bad) == (bad, [])


def test_hermes_plain_text_is_returned_untouched() -> None:
    assert tool_call_parser("hermes")("  Paris is sunny.\n") == ("  Paris is sunny.\n", [])


def test_arguments_may_be_a_json_string_or_missing() -> None:
    text = (
        '<tool_call>{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}</tool_call>'
        '<tool_call>{"name": "now"}</tool_call>'
    )
    assert tool_call_parser("hermes")(text) == (None, [WEATHER, ParsedToolCall("now", "{}")])


# llama3_json


def test_llama3_one_call_with_python_tag_and_parameters() -> None:
    text = '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}'
    assert tool_call_parser("llama3_json")(text) == (None, [WEATHER])


def test_llama3_several_calls_separated_by_semicolons() -> None:
    text = (
        '{"name": "get_weather", "arguments": {"city": "Paris"}}; '
        '{"name": "get_time", "parameters": {"zone": "UTC"}};\n'
    )
    assert tool_call_parser("llama3_json")(text) == (None, [WEATHER, TIME])


def test_llama3_semicolon_inside_a_string_is_not_a_separator() -> None:
    text = '{"name": "say", "parameters": {"text": "a; b"}}'
    assert tool_call_parser("llama3_json")(text) == (None, [ParsedToolCall("say", '{"text":"a; b"}')])


@pytest.mark.parametrize(
    "text",
    [
        "Paris is sunny.",
        '{"name": "get_weather", "parameters": {"city": ',  # malformed
        '{"name": "get_weather", "parameters": {"city": "Paris"}} and more text',  # content around
        '{"city": "Paris"}',  # JSON, but not a call
        "",
    ],
)
def test_llama3_anything_else_is_plain_content(text: str) -> None:
    assert tool_call_parser("llama3_json")(text) == (text, [])


# mistral


def test_mistral_one_call() -> None:
    text = '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}]'
    assert tool_call_parser("mistral")(text) == (None, [WEATHER])


def test_mistral_several_calls_with_content_before() -> None:
    text = (
        "Checking both.[TOOL_CALLS]"
        '[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_time", "arguments": {"zone": "UTC"}}]'
    )
    assert tool_call_parser("mistral")(text) == ("Checking both.", [WEATHER, TIME])


def test_mistral_malformed_block_is_kept_as_content() -> None:
    text = 'Hmm [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Par'
    assert tool_call_parser("mistral")(text) == (text, [])
    bad = '[TOOL_CALLS][{"arguments": {}}]'
    good = '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]'
    assert tool_call_parser("mistral")(good + bad) == (bad, [WEATHER])


def test_mistral_plain_text() -> None:
    assert tool_call_parser("mistral")("Paris is sunny.") == ("Paris is sunny.", [])


# forced calls


def test_required_schema_ties_each_name_to_its_parameters() -> None:
    schema = tool_calls_schema(TOOLS, "required", parallel_tool_calls=True)
    assert schema["type"] == "array" and schema["minItems"] == 1 and "maxItems" not in schema
    weather, time = schema["items"]["anyOf"]
    assert weather["properties"] == {"name": {"type": "string", "enum": ["get_weather"]}, "parameters": CITY}
    assert time["properties"]["parameters"] == {"type": "object", "properties": {}}
    assert weather["required"] == ["name", "parameters"]


def test_required_without_parallel_calls_allows_one() -> None:
    assert tool_calls_schema(TOOLS, "required", parallel_tool_calls=False)["maxItems"] == 1


def test_named_choice_allows_one_call_of_that_tool() -> None:
    choice = {"type": "function", "function": {"name": "get_weather"}}
    schema = tool_calls_schema(TOOLS, choice, parallel_tool_calls=True)
    assert schema["maxItems"] == 1
    [item] = schema["items"]["anyOf"]
    assert item["properties"]["name"]["enum"] == ["get_weather"]


def test_named_choice_must_be_among_the_tools() -> None:
    with pytest.raises(ValueError, match="'get_stock'.*not among the tools"):
        tool_calls_schema(TOOLS, {"type": "function", "function": {"name": "get_stock"}}, True)


@pytest.mark.parametrize("choice", ["auto", "none", {"type": "function"}])
def test_choices_without_a_schema_are_refused(choice: str | dict) -> None:
    with pytest.raises(ValueError, match="expected 'required'"):
        tool_calls_schema(TOOLS, choice, True)


def test_required_needs_tools() -> None:
    with pytest.raises(ValueError, match="at least one tool"):
        tool_calls_schema([], "required", True)


def test_schema_accepts_valid_calls_and_rejects_invalid_ones() -> None:
    schema = tool_calls_schema(TOOLS, "required", parallel_tool_calls=True)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    valid = [{"name": "get_weather", "parameters": {"city": "Paris"}}, {"name": "get_time", "parameters": {}}]
    assert validator.is_valid(valid)
    for invalid in (
        [],
        [{"name": "get_weather", "parameters": {}}],  # get_weather requires a city
        [{"name": "get_stock", "parameters": {}}],
        [{"name": "get_time"}],
        {"name": "get_time", "parameters": {}},
    ):
        assert not validator.is_valid(invalid), invalid
    single = jsonschema.Draft202012Validator(tool_calls_schema(TOOLS, "required", parallel_tool_calls=False))
    assert single.is_valid(valid[:1]) and not single.is_valid(valid)


def test_parameter_defs_move_to_the_schema_root() -> None:
    parameters = {
        "type": "object",
        "properties": {"place": {"$ref": "#/$defs/Place"}},
        "required": ["place"],
        "$defs": {"Place": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
    }
    schema = tool_calls_schema([_tool("go", parameters)], "required", True)
    assert "$defs" not in schema["items"]["anyOf"][0]["properties"]["parameters"]
    assert "$defs" in parameters  # the caller's tool is left alone
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid([{"name": "go", "parameters": {"place": {"city": "Paris"}}}])
    assert not validator.is_valid([{"name": "go", "parameters": {"place": {}}}])


def test_parse_forced_tool_calls() -> None:
    text = (
        '[{"name": "get_weather", "parameters": {"city": "Paris"}},'
        ' {"name": "get_time", "parameters": {"zone": "UTC"}}]'
    )
    assert parse_forced_tool_calls(text) == [WEATHER, TIME]


def test_conflicting_tools_are_refused() -> None:
    with pytest.raises(ValueError, match="more than once"):
        tool_calls_schema([_tool("go"), _tool("go")], "required", True)
    first = _tool("a", {"type": "object", "$defs": {"P": {"type": "string"}}})
    second = _tool("b", {"type": "object", "$defs": {"P": {"type": "integer"}}})
    with pytest.raises(ValueError, match=r"\$defs/P"):
        tool_calls_schema([first, second], "required", True)


@pytest.mark.parametrize("text", ['[{"name": "get_weather", "parameters": {', '{"name": "x"}', '[{"parameters": {}}]'])
def test_parse_forced_tool_calls_refuses_invalid_output(text: str) -> None:
    with pytest.raises(ValueError):
        parse_forced_tool_calls(text)


# OpenAI objects


def test_openai_tool_calls_have_fresh_ids() -> None:
    entries = openai_tool_calls([WEATHER, TIME])
    assert [e["function"] for e in entries] == [
        {"name": "get_weather", "arguments": '{"city":"Paris"}'},
        {"name": "get_time", "arguments": '{"zone":"UTC"}'},
    ]
    assert {e["type"] for e in entries} == {"function"}
    assert all(re.fullmatch(r"call_[A-Za-z0-9]{24}", e["id"]) for e in entries)
    assert entries[0]["id"] != entries[1]["id"]
    assert json.loads(entries[0]["function"]["arguments"]) == {"city": "Paris"}
    assert re.fullmatch(r"call_[A-Za-z0-9]{24}", new_tool_call_id())

