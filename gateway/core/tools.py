"""OpenAI function calling: tool calls parsed out of generated text, and schemas that force them.

The backend only generates text. With `tool_choice` "auto" the model writes calls in
its own format and a named parser finds them; with "required" or a named function the
output is constrained by `tool_calls_schema` and read back by `parse_forced_tool_calls`.
"""

from __future__ import annotations

import json
import re
import secrets
import string
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class ParsedToolCall:
    name: str
    arguments: str  # compact JSON object


ToolCallParser = Callable[[str], tuple[str | None, list[ParsedToolCall]]]

_DECODER = json.JSONDecoder()
_HERMES_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_PYTHON_TAG = "<|python_tag|>"
_MISTRAL_MARKER = "[TOOL_CALLS]"
_ID_ALPHABET = string.ascii_letters + string.digits


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _call_from_object(item: Any) -> ParsedToolCall | None:
    """A call from `{"name", "arguments" | "parameters"}`; None when the object is not one."""
    if not isinstance(item, dict):
        return None
    name = item.get("name")
    arguments = item.get("arguments", item.get("parameters", {}))
    if isinstance(arguments, str):
        # Some models encode the arguments object as a JSON string, as OpenAI's own wire format does.
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if not isinstance(name, str) or not name or not isinstance(arguments, dict):
        return None
    return ParsedToolCall(name, _compact(arguments))


def _result(text: str, kept: list[str], calls: list[ParsedToolCall]) -> tuple[str | None, list[ParsedToolCall]]:
    """Plain output stays untouched; around calls, the leftover text is the content."""
    if not calls:
        return text, []
    return "".join(kept).strip() or None, calls


def parse_hermes(text: str) -> tuple[str | None, list[ParsedToolCall]]:
    """`<tool_call>{json}</tool_call>` blocks (Hermes, Qwen). A final block may lack its closing tag."""
    calls: list[ParsedToolCall] = []
    kept: list[str] = []
    position = 0
    for block in _HERMES_BLOCK.finditer(text):
        try:
            call = _call_from_object(json.loads(block.group(1)))
        except ValueError:
            call = None
        if call is not None:
            calls.append(call)
            kept.append(text[position : block.start()])
            position = block.end()
    kept.append(text[position:])
    return _result(text, kept, calls)


def parse_llama3_json(text: str) -> tuple[str | None, list[ParsedToolCall]]:
    """Llama 3.x: the whole output is `{"name", "parameters"}` objects separated by `;`."""
    rest = text.strip().removeprefix(_PYTHON_TAG).strip()
    calls: list[ParsedToolCall] = []
    while rest:
        try:
            item, end = _DECODER.raw_decode(rest)
        except ValueError:
            return text, []
        call = _call_from_object(item)
        rest = rest[end:].strip()
        if call is None or (rest and not rest.startswith(";")):
            return text, []
        calls.append(call)
        rest = rest.removeprefix(";").strip()
    return _result(text, [], calls)


def _mistral_block(block: str) -> tuple[list[ParsedToolCall], str] | None:
    """The calls of the JSON array opening `block`, and the text after it."""
    body = block.lstrip()
    try:
        items, end = _DECODER.raw_decode(body)
    except ValueError:
        return None
    if not isinstance(items, list):
        return None
    calls = [call for call in map(_call_from_object, items) if call is not None]
    if len(calls) != len(items):
        return None
    return calls, body[end:]


def parse_mistral(text: str) -> tuple[str | None, list[ParsedToolCall]]:
    """`[TOOL_CALLS]` then a JSON array of `{"name", "arguments"}`; text before it is content."""
    first, *blocks = text.split(_MISTRAL_MARKER)
    calls: list[ParsedToolCall] = []
    kept = [first]
    for block in blocks:
        found = _mistral_block(block)
        if found is None:
            kept.append(_MISTRAL_MARKER + block)
        else:
            calls += found[0]
            kept.append(found[1])
    return _result(text, kept, calls)


_PARSERS: dict[str, ToolCallParser] = {
    "hermes": parse_hermes,
    "llama3_json": parse_llama3_json,
    "mistral": parse_mistral,
}


def tool_call_parser(name: str) -> ToolCallParser:
    try:
        return _PARSERS[name]
    except KeyError:
        raise ValueError(f"Unknown tool call parser {name!r}; known parsers: {', '.join(sorted(_PARSERS))}.") from None


def _function(tool: dict[str, Any]) -> dict[str, Any]:
    function = tool.get("function") if tool.get("type") == "function" else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise ValueError("Each tool must be {'type': 'function', 'function': {'name': ...}}.")
    return function


def _chosen_name(tool_choice: str | dict[str, Any]) -> str:
    function = tool_choice.get("function") if isinstance(tool_choice, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise ValueError(
            f"tool_choice {tool_choice!r} is not constrained by a schema; "
            "expected 'required' or {'type': 'function', 'function': {'name': ...}}."
        )
    return function["name"]


def _call_schema(function: dict[str, Any], definitions: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One call's schema. `$defs` move to the root, where the parameters' `$ref`s resolve."""
    parameters = dict(function.get("parameters") or {"type": "object", "properties": {}})
    for key in ("$defs", "definitions"):
        for def_name, definition in parameters.pop(key, {}).items():
            if definitions.setdefault(key, {}).setdefault(def_name, definition) != definition:
                raise ValueError(f"Tools define {key}/{def_name} differently; rename one of them.")
    return {
        "type": "object",
        "properties": {"name": {"type": "string", "enum": [function["name"]]}, "parameters": parameters},
        "required": ["name", "parameters"],
        "additionalProperties": False,
    }


def tool_calls_schema(
    tools: list[dict[str, Any]], tool_choice: str | dict[str, Any], parallel_tool_calls: bool
) -> dict[str, Any]:
    """JSON Schema for the whole output when a call is forced: `[{"name", "parameters"}, ...]`."""
    functions: dict[str, dict[str, Any]] = {}
    for function in map(_function, tools):
        if function["name"] in functions:
            raise ValueError(f"Tool name {function['name']!r} is used more than once.")
        functions[function["name"]] = function
    if tool_choice == "required":
        if not functions:
            raise ValueError("tool_choice 'required' needs at least one tool.")
        chosen = list(functions.values())
    else:
        name = _chosen_name(tool_choice)
        if name not in functions:
            raise ValueError(f"tool_choice names function {name!r}, which is not among the tools: {sorted(functions)}.")
        chosen = [functions[name]]
    definitions: dict[str, dict[str, Any]] = {}
    schema: dict[str, Any] = {
        "type": "array",
        "items": {"anyOf": [_call_schema(function, definitions) for function in chosen]},
        "minItems": 1,
    }
    if tool_choice != "required" or not parallel_tool_calls:
        schema["maxItems"] = 1
    return {**schema, **definitions}


def parse_forced_tool_calls(text: str) -> list[ParsedToolCall]:
    """Calls from output generated under `tool_calls_schema`. Raises ValueError when it does not match."""
    items = json.loads(text)
    if not isinstance(items, list):
        raise ValueError("Expected a JSON array of tool calls.")
    calls = []
    for item in items:
        call = _call_from_object(item)
        if call is None:
            raise ValueError(f"Not a tool call: {item!r}")
        calls.append(call)
    return calls


def new_tool_call_id() -> str:
    return "call_" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(24))


def openai_tool_calls(calls: list[ParsedToolCall]) -> list[dict[str, Any]]:
    """The `tool_calls` of an assistant message, each with a fresh id."""
    return [
        {"id": new_tool_call_id(), "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
        for call in calls
    ]
